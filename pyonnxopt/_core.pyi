"""Typed stub of the native core (csrc/bindings/module.cpp)."""

from typing import Optional, Union

import numpy as np

PROTOBUF_LIMIT: int

class Model:
    ir_version: Optional[int]
    model_version: Optional[int]
    producer_name: Optional[str]
    producer_version: Optional[str]
    domain: Optional[str]
    doc_string: Optional[str]
    metadata_props: dict[str, str]
    opset_imports: list[tuple[str, int]]
    path: str
    base_dir: str
    graph: Optional[Graph]
    functions: list[Function]
    training_info_count: int
    def all_graphs(self) -> list[Graph]: ...
    def all_tensors(self) -> list[Tensor]: ...
    def external_files(self) -> list[str]: ...
    def check_invariants(self) -> list[str]: ...
    def serialize(self) -> bytes: ...
    def save(self, path: str, mode: str = "keep", location: str = "", size_threshold: int = 1024,
             align: int = 4096, align_threshold: int = 1048576, max_file_size: int = 0) -> dict: ...

class Graph:
    name: str
    is_function_body: bool
    parent: Optional[Graph]
    owner_node: Optional[Node]
    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    initializers: list[Tensor]
    sparse_initializer_count: int
    values: list[Value]
    def __len__(self) -> int: ...
    def value(self, name: str) -> Optional[Value]: ...
    def topological_order(self) -> list[Node]: ...
    def outer_references(self) -> list[Value]: ...
    def remove_node(self, node: Node) -> None: ...
    def remove_output(self, index: int) -> None: ...
    def replace_all_uses(self, old: Value, new: Value) -> None: ...
    def set_input(self, node: Node, index: int, value: Optional[Value]) -> None: ...
    def add_node(self, op_type: str, inputs: list[Optional[Value]], outputs: list[str], name: str = "",
                 domain: str = "", before: Optional[Node] = None) -> Node: ...
    def replace_node(self, node: Node, op_type: str, inputs: list[Optional[Value]], name: str = "",
                     domain: str = "") -> Node: ...

class Node:
    name: str
    op_type: str
    domain: str
    removed: bool
    pinned: bool  # settable: no pass changes or removes the node
    graph: Graph
    inputs: list[Optional[Value]]
    outputs: list[Optional[Value]]
    attributes: dict[str, object]
    subgraphs: list[Graph]

class Value:
    name: str  # settable: renames every reference
    graph: Graph
    producer: Optional[Node]
    producer_index: int
    uses: list[tuple[Node, int]]
    is_graph_input: bool
    is_graph_output: bool
    initializer: Optional[Tensor]
    type: dict

class Tensor:
    name: str
    dims: list[int]
    data_type: int
    dtype_name: str
    is_external: bool
    external_location: str
    nbytes: int
    def numpy_view(self) -> Optional[np.ndarray]: ...
    def serialize(self) -> bytes: ...
    def set_raw(self, data_type: int, dims: list[int], data: bytes) -> None: ...
    # Added by pyonnxopt.model:
    def numpy(self) -> np.ndarray: ...
    def set_data(self, array: Union[np.ndarray, object]) -> None: ...

class Function:
    name: str
    domain: str
    attribute_names: list[str]
    body: Graph

def load_file(path: str, base_dir: str = "", allow_external_outside: bool = False) -> Model: ...
def load_bytes(data: bytes, base_dir: str = "", allow_external_outside: bool = False) -> Model: ...
