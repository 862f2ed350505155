"""Symbolic shape refinement: what onnx's shape inference leaves unknown
(a dim it names `unk__N` or leaves out) worked out from the values that
shape arithmetic computes, on the main graph of the inferred copy.

onnx knows a Range's length only from constants, and an Expand's or a
ConstantOfShape's result only from a constant shape. Exporters compute
those from `Shape`:

    n = Gather(Shape(x: [batch, seq, 512]), 1)        # n is the dim `seq`
    r = Range(0, n, 1)                                 # onnx: [unk__0]  here: [seq]
    s = Concat([batch], [-1], [seq], [seq])
    e = Expand(m: [batch, 1, seq, seq], Where(Equal(s, -1), 1, s))
                                                       # onnx: [unk__1, ...]  here: [batch, 1, seq, seq]

so one walk in topological order tracks:

* the entries of small integer (and boolean) 0-D/1-D tensors: an int, a
  symbol (the size of some tensor's dim, so never negative) or unknown;
  through Shape, Gather, Slice, Concat, (Un)Squeeze, Reshape to a vector,
  Identity, Cast to int64, Add/Sub of dims and ints, Mul by an int, exact
  Div of ints, Equal, Where, integer ConstantOfShape, Constant and
  initializers; Max/Min of equal entries or ints, and ReduceProd of a whole
  vector of ints and dims, generated names among them (tf2onnx's flattened
  batch dims, its batch declared `unk__N`: a product kept as in rule 3);
* each value's dims: the inferred ones where they are an int or a symbol
  that is not one of onnx's generated unk__ names, else what the op gives from its inputs'
  dims (Range, Expand, ConstantOfShape, Reshape, Slice, Concat, Split,
  broadcasting elementwise ops, MatMul, Gemm, Conv and pools, Transpose,
  Gather, (Un)Squeeze, Attention, shape-keeping unary ops and
  normalizations).

A dim is only ever given a value that holds for every input the model
accepts. The rules for that:

1. Broadcasting two dims: equal ones stay; a 1 gives the other; an int
   other than 1 wins over a symbol (the symbol is then 1 or that int);
   two different symbols, or an unknown beside anything but an int other
   than 1, stay unknown.
2. Range(start, limit, 1) has limit - start elements when that is a dim
   or a sum of dims (GPT-2's positions, Range(past, past + seq)); any
   other Range only when all three are ints.
3. Reshape's -1 is worked out only when the other entries' product divides
   the input's symbolically (each symbol cancelled by the same symbol).
   What is left may be a product such as 12*B: kept inside the walk (never
   written), so that a later Reshape's -1 can cancel it back to B (the
   sequence-first head split [S, B, E] -> [S, B*H, D] -> [B, H, S, D]).
   A target entry computed as k times a dim is that product (Bloom's
   `Mul(B, H)` in [B*H, -1, D]).
4. Equal of a dim and a negative int is false; of a symbol with itself true.
   Add and Sub of dims and ints, and Mul by an int, give sums (Linear)
   that stay in the walk, never written (but see 6). A kept product read
   back from a shape, times an int or divided by one it holds, is a
   product again (Bloom splits B*H back into B with `Div(·, H)`).
5. Slice from 0 to a dim S, step 1, of an axis of int size N has min(S, N)
   elements; that bound is kept inside the walk (never written) and only
   turns into S when broadcast against S: where S > N the broadcast fails,
   so every input the model accepts has S <= N. This is BERT's position
   embedding, `Slice(table[1, 512], 0, seq)` added to `[batch, seq, 768]`.
   The same holds for the last S, `Slice(x, N - S, N or more)` (MPT's ALiBi
   bias): past N its start, negative, counts from the end, which only
   changes how the broadcast fails (or gives 1 element, which broadcasts).
6. A sum of dims that a value onnx knows has as a named symbol (a graph
   output's declared `total_seq`, Concat(past, new) along that axis) is
   that symbol wherever else it comes up.
7. A Conv's or pool's spatial dim of a symbolic input dim H (ceil_mode
   0) is floor((H + pads - dilation * (kernel - 1) - 1) / stride) + 1: H
   plus a constant for stride 1, else a new symbol named by that formula,
   such as `floor((height-1)/2)+1`, written out like any other (the next
   window's name folds the +1 in: `floor(floor((height-1)/2)/2)+1`). Two
   dims with that name are the same arithmetic on the same dim, so equal: the
   shortcut of a dynamic-size ResNet block provably has its main path's
   shape. auto_pad SAME gives `ceil(H/stride)`.
8. A graph output's own name for a dim (torch names the dims of an output
   given no dynamic axes `LayerNormalizationout1_dim_0`) that the walk
   computes as another symbol, the same one wherever that name is, and
   that no graph input has, is that symbol: a full seq2seq export returns
   its encoder's states, and the decoder's cross-attention then reads its
   batch as `batch` again, not as the output's name.

9. onnx's generated names (`unk__N`) take part in the arithmetic as
   symbols: within one inference a name on two values is one dim that onnx
   passed along. A Reshape of [B, unk__1, 64] to [B, -1, 8, 8] is [B,
   unk__1, 8, 8] (torch's TorchScript exporter splits a UNet's H*W
   positions into heads so), and where onnx gave a value a fresh name for
   a dim the walk proves is another generated one, the two names become
   one everywhere. A generated name never replaces an int or a named
   symbol, and no name is built from one.

Refused (left unknown): ops not listed, other domains, values whose rank
onnx does not know, subgraphs and function bodies."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from pyonnxopt.proto_graphs import bodies, graphs

_GENERATED = "unk__"
_MAX_ENTRIES = 64

_UNARY = {"Abs", "Neg", "Relu", "Sqrt", "Exp", "Log", "Erf", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
          "Identity", "Cast", "Not", "Floor", "Ceil", "Round", "Sign", "Reciprocal", "Gelu", "LeakyRelu",
          "HardSigmoid", "Softplus", "Elu", "Selu", "Sin", "Cos", "IsNaN", "IsInf", "CastLike", "Clip",
          "LayerNormalization", "RMSNormalization", "BatchNormalization", "InstanceNormalization",
          "GroupNormalization", "Dropout", "HardSwish", "Mish"}  # first output: the first input's shape
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
              "GreaterOrEqual", "And", "Or", "Xor", "Where", "Min", "Max", "PRelu", "BitwiseAnd",
              "BitwiseOr", "BitwiseXor"}


def _is_symbol(d) -> bool:
    return isinstance(d, str) and d != "" and not d.startswith(_GENERATED)


def dims_of(type_proto) -> Optional[list]:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    out = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def _known(d) -> bool:
    return isinstance(d, int) or _is_symbol(d)


def _all_known(dims: Optional[list]) -> bool:
    return dims is not None and all(map(_known, dims))


def _generated(d) -> bool:
    return isinstance(d, str) and d.startswith(_GENERATED)


def _symbolic(d) -> bool:
    """A dim the arithmetic takes (rule 9): an int, a named symbol, or one
    of onnx's generated unk__ names."""
    return _known(d) or _generated(d)


class AtMost(tuple):
    """min(symbol, bound): a Slice's length to a dim (rule 5); not a dim
    onnx can hold, so never written out."""

    def __new__(cls, symbol: str, bound: int):
        return super().__new__(cls, (symbol, bound))


class Product(tuple):
    """factor * the symbols' product, as a Reshape's -1 of symbolic dims
    gives it (rule 3: [S, B, 768] -> [S, -1, 64] is [S, 12*B, 64]); kept
    so that a later -1 can cancel it, never written out."""

    def __new__(cls, factor: int, symbols: Counter):
        return super().__new__(cls, (factor, tuple(sorted(symbols.items()))))

    @property
    def symbols(self) -> Counter:
        return Counter(dict(self[1]))


class Linear:
    """const + the sum of coefficient * symbol: dims added up (GPT-2's past
    length plus the new tokens'), kept inside the walk; never written, but
    a value onnx names (the present keys' `total_seq`) names it from then
    on (rule 6)."""

    __slots__ = ("const", "terms")

    def __init__(self, const: int, terms: dict):
        self.const = const
        self.terms = tuple(sorted((s, c) for s, c in terms.items() if c))

    def __eq__(self, other) -> bool:
        return isinstance(other, Linear) and (self.const, self.terms) == (other.const, other.terms)

    def __hash__(self) -> int:
        return hash((self.const, self.terms))

    def __repr__(self) -> str:
        return " + ".join([f"{c}*{s}" for s, c in self.terms] + ([str(self.const)] if self.const else []))

    def nonnegative(self) -> bool:
        return self.const >= 0 and all(c > 0 for _, c in self.terms)


def _as_linear(x) -> Optional[Linear]:
    if isinstance(x, Linear):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Linear(x, {})
    return Linear(0, {x: 1}) if _is_symbol(x) else None


def _simplest(x: Linear):
    """An int, a symbol, or the Linear itself."""
    if not x.terms:
        return x.const
    if x.const == 0 and len(x.terms) == 1 and x.terms[0][1] == 1:
        return x.terms[0][0]
    return x


def _linear_sum(x, y, sign: int = 1):
    """x + sign * y over ints, symbols and Linears; None otherwise."""
    lx, ly = _as_linear(x), _as_linear(y)
    if lx is None or ly is None:
        return None
    terms = dict(lx.terms)
    for s, c in ly.terms:
        terms[s] = terms.get(s, 0) + sign * c
    return _simplest(Linear(lx.const + sign * ly.const, terms))


def _internal(d) -> bool:
    """A dim the walk keeps for later rules but onnx cannot hold."""
    return isinstance(d, (AtMost, Product, Linear))


def broadcast_dim(a, b):
    """Rules 1 and 5: the dim of broadcasting a against b (None: unknown)."""
    if _internal(a) and a == b:
        return a
    if isinstance(a, AtMost) or isinstance(b, AtMost):
        bounded, other = (a, b) if isinstance(a, AtMost) else (b, a)
        if other == 1:
            return bounded
        if isinstance(other, int) or other == bounded or other == bounded[0]:
            return other  # as rule 1; and S beside min(S, N) is S
        return None
    a = a if _symbolic(a) else None
    b = b if _symbolic(b) else None
    if a == 1:
        return b
    if b == 1:
        return a
    if a is not None and a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None  # not a valid broadcast: leave it to onnx
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast(shapes: list) -> Optional[list]:
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        d = dims[0] if _symbolic(dims[0]) or _internal(dims[0]) else None
        for e in dims[1:]:
            d = broadcast_dim(d, e)
        out.append(d)
    return out


def _product(dims: list) -> Optional[tuple]:
    """(int factor, Counter of symbols), or None with an unknown dim."""
    c, syms = 1, Counter()
    for d in dims:
        if isinstance(d, int):
            c *= d
        elif isinstance(d, Product):
            c *= d[0]
            syms += d.symbols
        elif _symbolic(d):
            syms[d] += 1
        else:
            return None
    return c, syms


def reshape_dims(x: Optional[list], target: list, allowzero: bool) -> Optional[list]:
    out = []
    for j, e in enumerate(target):
        if isinstance(e, int) and e == 0 and not allowzero:
            out.append(x[j] if x is not None and j < len(x) and (_symbolic(x[j]) or _internal(x[j])) else None)
        elif isinstance(e, int) and e == -1:
            out.append(-1)
        elif (isinstance(e, int) and e >= 0) or _is_symbol(e) or _generated(e) or isinstance(e, Product):
            out.append(e)
        else:
            out.append(_monomial(e))
    if out.count(-1) > 1:
        return None
    if -1 in out:
        i = out.index(-1)
        out[i] = None
        whole = _product(x) if x is not None else None
        part = _product([d for j, d in enumerate(out) if j != i])
        if whole and part and part[0] != 0 and whole[0] % part[0] == 0 and not (part[1] - whole[1]):
            out[i] = _product_dim(whole[0] // part[0], whole[1] - part[1])
    return out


def _monomial(e):
    """A sum that is k times one dim (Bloom's and BART's batch times heads,
    `Mul(B, H)` in a Reshape's target) as a Product; else None."""
    if isinstance(e, Linear) and e.const == 0 and len(e.terms) == 1:
        (symbol, k), = e.terms
        if k > 0 and (_is_symbol(symbol) or _generated(symbol)):
            return _product_dim(k, Counter({symbol: 1}))
    return None


def _product_dim(factor: int, symbols: Counter):
    """factor * the symbols' product as the walk keeps a dim: an int, one
    symbol, or a Product."""
    if not symbols:
        return factor
    if factor == 1 and sum(symbols.values()) == 1:
        return next(iter(symbols))
    return Product(factor, symbols)


class _Walk:
    def __init__(self, graph, names: Optional[dict] = None, aliases: Optional[dict] = None):
        self.names = dict(names or {})  # Linear -> the symbol a value onnx knows gives it (rule 6)
        self.aliases = dict(aliases or {})  # a graph output's name for a dim -> the symbol it is (rule 8)
        self.dims = {}     # name -> list of dims (int | symbol | generated unk__ str | None)
        self.values = {}   # name -> (entries, scalar)
        self.input_names = {v.name for v in graph.input}
        self.output_names = {v.name for v in graph.output}
        self.input_symbols = {d for v in graph.input for d in (dims_of(v.type) or []) if _is_symbol(d)}
        # tf2onnx declares unknown input dims as unk__N: the model's own names, stable across inferences
        self.declared_generated = frozenset(d for v in graph.input for d in (dims_of(v.type) or []) if _generated(d))
        self._computed_as: dict = {}  # an output's name for a dim -> the symbols the walk computed for it
        self.links: dict = {}  # a generated name -> one it was proven equal to (rule 9)
        self.generated_names: dict = {}  # a sum or product the walk keeps -> the generated name onnx gave it
        for g in graphs(graph):  # subgraphs' values are named apart from each other (shapes.infer)
            if g is not graph:
                self.input_names |= {v.name for v in g.input}
            for v in list(g.input) + list(g.value_info) + list(g.output):
                d = dims_of(v.type)
                if d is not None and v.name not in self.dims:
                    self.dims[v.name] = [self.aliases.get(e, e) if isinstance(e, str) else e for e in d]
            for t in g.initializer:
                if t.name not in self.input_names:  # a fed input keeps its declared type
                    self.dims[t.name] = [int(d) for d in t.dims]
                    self._constant(t.name, t)

    def _constant(self, name, tensor) -> None:
        from onnx import numpy_helper

        if tensor.data_type not in (6, 7, 9) or len(tensor.dims) > 1 or tensor.data_location == 1:
            return
        if tensor.dims and tensor.dims[0] > _MAX_ENTRIES:
            return
        try:
            a = numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError):
            return
        entries = [bool(x) if tensor.data_type == 9 else int(x) for x in a.reshape(-1)]
        self.values[name] = ([("b", e) if tensor.data_type == 9 else e for e in entries], a.ndim == 0)

    def value(self, name):
        if name in self.input_names:
            return None  # a graph input is fed, even one with an initializer
        return self.values.get(name)

    def run(self, graph, refined: Optional[dict] = None) -> dict:
        """Walks the graph, and each subgraph after the node that holds it."""
        refined = {} if refined is None else refined
        for n in graph.node:
            for body in bodies(n):
                self.run(body, refined)
            if n.domain not in ("", "ai.onnx"):
                continue
            try:
                self._values(n)
                outputs = self._split_dims(n) if n.op_type == "Split" else [self._node_dims(n)]
            except (ValueError, IndexError, TypeError, KeyError, AttributeError, ZeroDivisionError):
                continue
            for name, mine in zip(n.output, outputs):
                if mine is not None and name:
                    self._merge(name, mine, refined)
        return refined

    def linked(self, d):
        """A generated name as the one it was linked to (rule 9), else d."""
        while isinstance(d, str) and d in self.links:
            d = self.links[d]
        return d

    def canonical(self, d):
        """As written out: `linked`, and a kept sum or product as the
        generated name onnx gave it (rule 9)."""
        return self.linked(self.generated_names.get(d, d) if isinstance(d, (Product, Linear)) else d)

    def _merge(self, name: str, mine: list, refined: dict) -> None:
        mine = [self.linked(self.names.get(m, m) if isinstance(m, Linear) else m) for m in mine]
        have = self.dims.get(name)
        if have is None:  # onnx gave it no rank (a Reshape to a computed shape): the walk's dims are news
            self.dims[name] = mine
            refined[name] = mine
            return
        if len(have) != len(mine):
            return
        have = [self.linked(h) for h in have]
        for h, m in zip(have, mine):
            if _generated(h) and isinstance(m, (Product, Linear)):
                m = self.generated_names.setdefault(m, h)
            h, m = self.linked(h), self.linked(m)  # an earlier pair may have linked either: roots only, no cycle
            if _generated(h) and _generated(m) and h != m:
                self.links[h] = m  # one dim: onnx named it twice
        for h, m in zip(have, mine):
            if _is_symbol(h) and isinstance(m, Linear):
                self.names.setdefault(m, h)
            if name in self.output_names and _is_symbol(h) and _is_symbol(m) and h != m and h not in self.input_symbols:
                self._computed_as.setdefault(h, set()).add(m)
        # onnx's int or named symbol stays; its generated unk__ name gives way
        better = [h if _known(h) else (m if _symbolic(m) or _internal(m) else h) for h, m in zip(have, mine)]
        if any(b != h and (_known(b) or _generated(b)) and not _known(h) for b, h in zip(better, self.dims[name])):
            refined[name] = better
        self.dims[name] = better

    def found_aliases(self) -> dict:
        """Rule 8: each output dim name the walk computed as one other symbol."""
        return {h: next(iter(ms)) for h, ms in self._computed_as.items() if len(ms) == 1}

    def _split_dims(self, n) -> list:
        """Split's outputs: the input's dims, the axis as the split sizes
        (constants) say, or as an even split of a known int."""
        x = self.dims.get(n.input[0])
        if x is None:
            return []
        attrs = {a.name: a for a in n.attribute}
        axis = attrs["axis"].i if "axis" in attrs else 0
        axis += len(x) if axis < 0 else 0
        sizes = list(attrs["split"].ints) if "split" in attrs else None
        if sizes is None and len(n.input) > 1 and n.input[1]:
            v = self.value(n.input[1])
            sizes = list(v[0]) if v and all(isinstance(e, int) for e in v[0]) else None
        if sizes is None:
            parts = len(n.output)
            if not isinstance(x[axis], int) or x[axis] % parts or "num_outputs" in attrs:
                return []  # uneven splits (num_outputs) have their own rule: left to onnx
            sizes = [x[axis] // parts] * parts
        return [x[:axis] + [size] + x[axis + 1:] for size in sizes]

    # ------------------------------------------------------------ values

    def _values(self, n) -> None:
        op = n.op_type
        attrs = {a.name: a for a in n.attribute}
        ins = list(n.input)
        out = n.output[0] if n.output else ""
        if op == "Constant":
            if "value" in attrs:
                self._constant(out, attrs["value"].t)
            return
        if op == "Shape":
            d = self.dims.get(ins[0])
            if d is None:
                return
            r = len(d)
            start = attrs["start"].i if "start" in attrs else 0
            end = attrs["end"].i if "end" in attrs else r
            start = max(0, min(r, start + r if start < 0 else start))
            end = max(0, min(r, end + r if end < 0 else end))
            entries = [self.canonical(x) if _internal(x) else x for x in d[start:end]]  # rule 9's names
            self.values[out] = ([x if _symbolic(x) else None for x in entries], False)
            return
        vals = [self.value(i) if i else None for i in ins]
        if op in ("Identity",) and vals[0]:
            self.values[out] = vals[0]
        elif op == "Cast" and vals[0] and attrs["to"].i in (6, 7):  # tf2onnx computes shapes in int32
            self.values[out] = ([e if isinstance(e, (int, Product)) or _is_sym_entry(e) else None for e in vals[0][0]],
                                vals[0][1])
        elif op == "Gather" and vals[0] and vals[1] and not vals[0][1]:
            if (attrs["axis"].i if "axis" in attrs else 0) != 0:
                return
            data, (idx, scalar) = vals[0][0], vals[1]
            picked = [data[i] for i in idx if isinstance(i, int) and -len(data) <= i < len(data)]
            if len(picked) == len(idx):
                self.values[out] = (picked, scalar)
        elif op == "Unsqueeze" and vals[0] and vals[0][1]:
            axes = list(attrs["axes"].ints) if "axes" in attrs else (vals[1][0] if len(vals) > 1 and vals[1] else None)
            if axes in ([0], [-1]):
                self.values[out] = (list(vals[0][0]), False)
        elif op == "Squeeze" and vals[0] and not vals[0][1] and len(vals[0][0]) == 1:
            axes = list(attrs["axes"].ints) if "axes" in attrs else (vals[1][0] if len(vals) > 1 and vals[1] else [0])
            if axes in ([0], [-1]):
                self.values[out] = (list(vals[0][0]), True)
        elif op == "Concat" and vals and all(v is not None and not v[1] for v in vals):
            self.values[out] = ([e for v in vals for e in v[0]], False)
        elif op == "Slice" and vals[0] and not vals[0][1] and len(ins) >= 3 and vals[1] and vals[2]:
            axes = vals[3][0] if len(vals) > 3 and vals[3] else [0]
            steps = vals[4][0] if len(vals) > 4 and vals[4] else [1]
            # step 1 only: there Python's slice clamps as Slice does
            if axes in ([0], [-1]) and len(vals[1][0]) == 1 and len(vals[2][0]) == 1 and steps == [1]:
                s, e = vals[1][0][0], vals[2][0][0]
                if isinstance(s, int) and isinstance(e, int):
                    self.values[out] = (list(vals[0][0][s:e]), False)
        elif op == "Reshape" and vals[0] and len(vals) > 1 and vals[1] and len(vals[1][0]) == 1 \
                and vals[1][0][0] in (-1, len(vals[0][0])):
            self.values[out] = (list(vals[0][0]), False)  # a scalar or vector to a vector
        elif op == "ConstantOfShape" and vals[0] and not vals[0][1] and len(vals[0][0]) <= 1:
            self._filled(out, vals[0][0], attrs.get("value"))
        elif op in ("Add", "Sub", "Mul", "Div", "Equal") and len(vals) == 2 and vals[0] and vals[1]:
            self._elementwise(op, vals[0], vals[1], out)
        elif op == "Where" and len(vals) == 3 and all(vals):
            self._where(vals, out)
        elif op in ("Max", "Min") and len(vals) == 2 and vals[0] and vals[1]:
            self._extreme(op, vals[0], vals[1], out)
        elif op == "ReduceProd" and vals[0] and not vals[0][1] and len(vals) == 1 and "axes" not in attrs:
            self._product_of(vals[0][0], out, keepdims=attrs["keepdims"].i if "keepdims" in attrs else 1)

    def _filled(self, out, shape: list, value) -> None:
        """ConstantOfShape of an integer or boolean value (its default is a
        float 0, not an index) to a vector of known length, or a scalar."""
        if value is None or value.t.data_type not in (6, 7, 9):
            return
        if not all(isinstance(e, int) and 0 <= e <= _MAX_ENTRIES for e in shape):
            return
        from onnx import numpy_helper

        x = numpy_helper.to_array(value.t).reshape(-1)[0].item()
        entry = ("b", bool(x)) if value.t.data_type == 9 else int(x)
        self.values[out] = ([entry] * (shape[0] if shape else 1), not shape)

    def _elementwise(self, op, a, b, out) -> None:
        (ea, sa), (eb, sb) = a, b
        if len(ea) != len(eb) and len(ea) != 1 and len(eb) != 1:
            return
        n = max(len(ea), len(eb))
        ea, eb = (ea * n if len(ea) == 1 else ea), (eb * n if len(eb) == 1 else eb)
        if op in ("Mul", "Div"):  # a product the walk kept, read back from a shape by its generated name (rule 4)
            kept = {self.linked(name): d for d, name in self.generated_names.items() if isinstance(d, Product)}
            ea, eb = ([kept.get(self.linked(x), x) if isinstance(x, str) else x for x in e] for e in (ea, eb))
        res = [_binary(op, x, y) for x, y in zip(ea, eb)]
        self.values[out] = (res, sa and sb)

    def _extreme(self, op, a, b, out) -> None:
        """Max/Min of two shape vectors (tf2onnx's broadcast of two batch
        shapes): entries equal, or both ints."""
        (ea, sa), (eb, sb) = a, b
        if len(ea) != len(eb):
            return
        pick = max if op == "Max" else min
        res = [x if x == y and x is not None else pick(x, y) if isinstance(x, int) and isinstance(y, int) else None
               for x, y in zip(ea, eb)]
        self.values[out] = (res, sa and sb)

    def _product_of(self, entries: list, out, keepdims: int) -> None:
        """ReduceProd of a whole shape vector (tf2onnx's flattened batch
        dims) whose entries are ints, dims' names or such products."""
        if not all(isinstance(e, Product) or _symbolic(e) for e in entries):
            return
        whole = _product(entries)
        if whole is not None:
            self.values[out] = ([_product_dim(*whole)], not keepdims)

    def _where(self, vals, out) -> None:
        (c, sc), (x, sx), (y, sy) = vals
        n = max(len(c), len(x), len(y))
        if any(len(e) not in (1, n) for e in (c, x, y)):
            return
        c, x, y = [e * n if len(e) == 1 else e for e in (c, x, y)]
        res = []
        for ci, xi, yi in zip(c, x, y):
            if not (isinstance(ci, tuple) and ci[0] == "b"):
                res.append(None)
            else:
                res.append(xi if ci[1] else yi)
        self.values[out] = (res, sc and sx and sy)

    # ------------------------------------------------------------ dims

    def _node_dims(self, n) -> Optional[list]:
        op = n.op_type
        attrs = {a.name: a for a in n.attribute}
        ins = list(n.input)
        d = [self.dims.get(i) if i else None for i in ins]
        if op in _UNARY:
            return list(d[0]) if d and d[0] is not None else None
        if op in _BROADCAST:
            return broadcast([x for x in d if x is not None]) if all(x is not None for x in d) else None
        if op == "MatMul" and len(d) == 2 and d[0] is not None and d[1] is not None:
            a, b = d
            if len(a) < 2 or len(b) < 2:
                return None
            batch = broadcast([a[:-2], b[:-2]])
            return None if batch is None else batch + [a[-2], b[-1]]
        if op == "Gemm" and len(d) >= 2 and d[0] is not None and d[1] is not None \
                and len(d[0]) == 2 and len(d[1]) == 2:
            ta = attrs["transA"].i if "transA" in attrs else 0
            tb = attrs["transB"].i if "transB" in attrs else 0
            return [d[0][1 if ta else 0], d[1][0 if tb else 1]]
        if op in ("Conv", "MaxPool", "AveragePool", "LpPool") and d and d[0] is not None and len(d[0]) >= 3:
            return _window_dims(op, d, attrs, self.declared_generated)
        if op == "Attention" and len(d) >= 3 and d[0] is not None and d[2] is not None:
            return _attention_dims(d[0], d[2], attrs)
        if op == "Transpose" and d[0] is not None:
            perm = list(attrs["perm"].ints) if "perm" in attrs else list(reversed(range(len(d[0]))))
            return [d[0][p] for p in perm] if sorted(perm) == list(range(len(d[0]))) else None
        if op == "Gather" and d[0] is not None and len(d) > 1 and d[1] is not None:
            axis = attrs["axis"].i if "axis" in attrs else 0
            axis = axis + len(d[0]) if axis < 0 else axis
            return d[0][:axis] + d[1] + d[0][axis + 1:]
        if op.startswith("Reduce") and d and d[0] is not None:
            return self._reduce_dims(n, attrs, d[0])
        if op == "GatherElements" and len(d) > 1 and d[1] is not None:
            return list(d[1])  # the indices' shape (HF BERT's buffered token_type_ids)
        if op == "Slice" and d[0] is not None:
            return self._slice_dims(d[0], ins)
        if op == "Concat" and d and all(x is not None and len(x) == len(d[0]) for x in d):
            return _concat_dims(d, attrs["axis"].i)
        if op == "Unsqueeze" and d[0] is not None:
            axes = self._axes(n, attrs)
            if axes is None:
                return None
            rank = len(d[0]) + len(axes)
            axes = sorted(a + rank if a < 0 else a for a in axes)
            it = iter(d[0])
            return [1 if i in axes else next(it) for i in range(rank)]
        if op == "Squeeze" and d[0] is not None:
            axes = self._axes(n, attrs)
            if axes is None:
                return None
            axes = {a + len(d[0]) if a < 0 else a for a in axes}
            return [x for i, x in enumerate(d[0]) if i not in axes]
        if op == "Range":
            v = [self.value(i) for i in ins]
            if len(v) != 3 or not all(v) or not all(len(e[0]) == 1 for e in v):
                return None
            start, limit, delta = (e[0][0] for e in v)
            length = _linear_sum(limit, start, -1) if delta == 1 else None
            if _is_symbol(length) or (isinstance(length, Linear) and length.nonnegative()):
                return [length]
            if all(isinstance(e, int) and not isinstance(e, bool) for e in (start, limit, delta)) and delta:
                return [max(-(-(limit - start) // delta), 0)]
            return None
        if op == "ConstantOfShape":
            v = self.value(ins[0])
            return [self._entry_dim(e) for e in v[0]] if v and not v[1] else None
        if op == "Expand" and d[0] is not None:
            v = self.value(ins[1])
            return broadcast([d[0], [self._entry_dim(e) for e in v[0]]]) if v and not v[1] else None
        if op == "Reshape" and len(ins) > 1:
            v = self.value(ins[1])
            if not v or v[1]:  # its rank is the target's length all the same
                k = d[1]
                return [None] * k[0] if k and len(k) == 1 and isinstance(k[0], int) else None
            allowzero = bool(attrs["allowzero"].i) if "allowzero" in attrs else False
            return reshape_dims(d[0], list(v[0]), allowzero)
        return None

    def _slice_dims(self, x: list, ins: list) -> Optional[list]:
        """Every axis given constant ints (Python's slice clamps as Slice
        does), or one from 0 to a dim with step 1 (rule 5)."""
        v = [self.value(i) if i else None for i in ins[1:5]] + [None] * (5 - len(ins))
        starts, ends = v[0], v[1]
        if not starts or not ends or starts[1] or ends[1] or len(starts[0]) != len(ends[0]):
            return None
        axes = v[2][0] if v[2] else list(range(len(starts[0])))
        steps = v[3][0] if v[3] else [1] * len(axes)
        if len(axes) != len(starts[0]) or len(steps) != len(axes):
            return None
        out = list(x)
        for a, s, e, st in zip(axes, starts[0], ends[0], steps):
            if not isinstance(a, int) or not -len(x) <= a < len(x):
                return None
            a += len(x) if a < 0 else 0
            if all(isinstance(t, int) for t in (x[a], s, e, st)) and st:
                out[a] = len(range(x[a])[s:e:st])
            elif s == 0 and st == 1 and _is_sym_entry(e):
                out[a] = e if x[a] == e else (AtMost(e, x[a]) if isinstance(x[a], int) else None)
            elif st == 1 and isinstance(x[a], int) and isinstance(e, int) and e >= x[a] and \
                    isinstance(s, Linear) and s.const == x[a] and all(c < 0 for _, c in s.terms):
                out[a] = AtMost(_linear_sum(x[a], s, -1), x[a])  # the last S of N, from N - S (rule 5)
            else:
                out[a] = None
        return out

    def _reduce_dims(self, n, attrs, x: list) -> Optional[list]:
        """A reduction over constant axes: those become 1 (or go, keepdims=0)."""
        axes = self._axes(n, attrs)
        if not axes or not all(-len(x) <= a < len(x) for a in axes):
            return None  # none given: all, or none with noop_with_empty_axes; onnx's inference says which
        axes = {a + len(x) if a < 0 else a for a in axes}
        keep = attrs["keepdims"].i if "keepdims" in attrs else 1
        return [1 if i in axes else e for i, e in enumerate(x) if keep or i not in axes]

    def _entry_dim(self, e):
        """A shape entry as a dim, a sum named as rule 6 says."""
        d = _as_dim(e)
        return self.names.get(d, d) if isinstance(d, Linear) else d

    def _axes(self, n, attrs) -> Optional[list]:
        if "axes" in attrs:
            return list(attrs["axes"].ints)
        if len(n.input) > 1 and n.input[1]:
            v = self.value(n.input[1])
            return list(v[0]) if v and all(isinstance(a, int) for a in v[0]) else None
        return None


def _is_sym_entry(e) -> bool:
    return _is_symbol(e) or _generated(e) or isinstance(e, Linear)


def _as_dim(e):
    if isinstance(e, tuple):
        return None
    if isinstance(e, int):
        return e if e >= 0 else None
    if isinstance(e, Linear):
        return e if e.nonnegative() else None
    return e if _is_sym_entry(e) else None


def _binary(op, x, y):
    if isinstance(x, Product) and isinstance(y, int) and not isinstance(y, bool) and y > 0 and op in ("Mul", "Div"):
        # Bloom's batch*heads read back from a shape and divided by the heads
        if op == "Mul":
            return _product_dim(x[0] * y, x.symbols)
        return _product_dim(x[0] // y, x.symbols) if x[0] % y == 0 else None
    if isinstance(x, tuple) or isinstance(y, tuple) or x is None or y is None:
        return None
    if op == "Equal":
        if isinstance(x, int) and isinstance(y, int):
            return ("b", x == y)
        if _is_sym_entry(x) and _is_sym_entry(y):
            return ("b", True) if x == y else None
        d, i = (x, y) if _is_sym_entry(x) else (y, x)
        nonnegative = isinstance(d, str) or d.nonnegative()  # a dim's name, or a sum of them
        return ("b", False) if i < 0 and nonnegative else None
    if op == "Div":  # exact division of ints only: no rounding rule to follow
        return x // y if isinstance(x, int) and isinstance(y, int) and y and x % y == 0 else None
    if isinstance(x, int) and isinstance(y, int):
        r = {"Add": x + y, "Sub": x - y, "Mul": x * y}[op]
        return r if -(1 << 63) <= r < (1 << 63) else None
    if op in ("Add", "Sub"):
        return _linear_sum(x, y, 1 if op == "Add" else -1)
    if op == "Mul" and (isinstance(x, int) or isinstance(y, int)):
        k, other = (x, y) if isinstance(x, int) else (y, x)
        lo = _as_linear(other)
        return None if lo is None else _simplest(Linear(k * lo.const, {s: k * c for s, c in lo.terms}))
    return None


def _window_dims(op: str, d: list, attrs, stable: frozenset = frozenset()) -> Optional[list]:
    """A Conv's or pool's output dims (rule 7): batch, channels (Conv: W's
    first dim), and each spatial dim from its input's, the kernel, stride,
    dilation and pads."""
    x = d[0]
    spatial = len(x) - 2
    w = d[1] if op == "Conv" and len(d) > 1 else None
    kernel = list(attrs["kernel_shape"].ints) if "kernel_shape" in attrs else (w[2:] if w else None)
    if kernel is None or len(kernel) != spatial or not all(isinstance(k, int) for k in kernel):
        return None
    strides = list(attrs["strides"].ints) if "strides" in attrs else [1] * spatial
    dilations = list(attrs["dilations"].ints) if "dilations" in attrs else [1] * spatial
    pads = list(attrs["pads"].ints) if "pads" in attrs else [0] * (2 * spatial)
    auto_pad = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
    ceil_mode = op != "Conv" and "ceil_mode" in attrs and attrs["ceil_mode"].i
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial or ceil_mode:
        return None
    out = [x[0], (w[0] if w else None) if op == "Conv" else x[1]]
    for i in range(spatial):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(_ceil_div(x[2 + i], strides[i], stable))
            continue
        begin, end = (pads[i], pads[spatial + i]) if auto_pad == "NOTSET" else (0, 0)
        out.append(_window_dim(x[2 + i], begin + end - dilations[i] * (kernel[i] - 1) - 1, strides[i], stable))
    return out


def _window_dim(size, offset: int, stride: int, stable: frozenset = frozenset()):
    """floor((size + offset) / stride) + 1 for an int or a symbol: the
    symbol itself or a Linear for stride 1, else a symbol named by that
    formula, so that two windows of the same arithmetic on the same dim
    (a ResNet block's strided 3x3 and its 1x1 shortcut) give the same dim.
    `stable`: generated names a graph input declares, which may be named
    from too."""
    if isinstance(size, int) and not isinstance(size, bool):
        return (size + offset) // stride + 1 if size + offset >= 0 and stride > 0 else None
    if not (_is_symbol(size) or size in stable) or stride < 1:
        return None
    if stride == 1:
        return size if offset == -1 else _linear_sum(size, offset + 1)
    if size.startswith("floor(") and size.endswith(")+1"):  # a name of this rule: fold its +1 in
        size, offset = size[:-2], offset + 1
    return f"floor(({size}{offset:+d})/{stride})+1" if offset else f"floor({size}/{stride})+1"


def _ceil_div(size, stride: int, stable: frozenset = frozenset()):
    if isinstance(size, int) and not isinstance(size, bool):
        return -(-size // stride) if stride > 0 else None
    if not (_is_symbol(size) or size in stable) or stride < 1:
        return None
    return size if stride == 1 else f"ceil({size}/{stride})"


def _concat_dims(inputs: list, axis: int) -> Optional[list]:
    """The axis adds up; every other dim is the inputs' one,
    which they must share: any input's known value holds."""
    rank = len(inputs[0])
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    out = []
    for i in range(rank):
        col = [x[i] for x in inputs]
        if i == axis:
            total = 0
            for c in col:
                total = None if total is None or not (_known(c) or isinstance(c, Linear)) else _linear_sum(total, c)
            out.append(total)
        else:
            out.append(next((c for c in col if _known(c)), None))
    return out


def _attention_dims(q: list, v: list, attrs) -> Optional[list]:
    """Attention's output: [B, S, H*Dv] from 3-d q and v (Dv = v's last
    dim / kv_num_heads), [B, H, S, Dv] from 4-d ones."""
    if len(q) == 4 and len(v) == 4:
        return [q[0], q[1], q[2], v[3]]
    heads_q = attrs["q_num_heads"].i if "q_num_heads" in attrs else 0
    heads_kv = attrs["kv_num_heads"].i if "kv_num_heads" in attrs else 0
    if len(q) != 3 or len(v) != 3 or not heads_q or not heads_kv or not isinstance(v[2], int) \
            or v[2] % heads_kv:
        return None
    return [q[0], q[1], v[2] // heads_kv * heads_q]


def refine(graph, aliases: Optional[dict] = None) -> int:
    """Writes better dims into the inferred copy's value_info (the main
    graph's and, their values named apart, its subgraphs'; values that are
    not graph inputs or outputs); returns how many. The
    output dim names rule 8 found are put in `aliases` (name -> symbol),
    and no value_info entry keeps one."""
    inputs = {d for v in graph.input for d in (dims_of(v.type) or [])}
    own = {d for v in graph.output for d in (dims_of(v.type) or []) if _is_symbol(d) and d not in inputs}
    every = graphs(graph)
    infos = {v.name: v for g in every for v in g.value_info}
    if not own and all(_all_known(dims_of(v.type)) for v in infos.values() if v.type.HasField("tensor_type")):
        return 0  # onnx left nothing unknown, no output has a name of its own: the walk could only confirm it
    walk = _Walk(graph)
    refined = walk.run(graph)
    found = walk.found_aliases()
    if walk.names or found:  # a sum named late, an output's name for a dim: again, naming them from the start
        walk = _Walk(graph, walk.names, found)
        refined = walk.run(graph)
    if aliases is not None:
        aliases.update(found)
    linked = 0
    for v in infos.values():  # rule 8's names, as the symbols they are; rule 9's links
        for d in v.type.tensor_type.shape.dim if v.type.HasField("tensor_type") else ():
            if d.dim_param in found:
                d.dim_param = found[d.dim_param]
            elif d.dim_param in walk.links and v.name not in refined:
                d.dim_param = walk.canonical(d.dim_param)
                linked += 1
    if not refined:
        return linked
    fixed = {name for g in every
             for name in [*(v.name for v in g.input), *(v.name for v in g.output), *(t.name for t in g.initializer)]}
    count = 0
    for name, dims in refined.items():
        if name in fixed or name not in infos:
            continue
        vi = infos[name]
        if not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in map(walk.canonical, dims):
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str) and d:
                dim.dim_param = d
        count += 1
    return count + linked
