"""The inputs a benchmark runs on: the user's samples (--inputs) or seeded
random ones, checked against each model's inputs."""

from __future__ import annotations

from typing import Mapping, Optional

from pyonnxopt.errors import Error

from pyonnxopt.verify.inputs import input_specs, load_samples, random_feeds, validate_feeds


def model_feeds(path: str, label: str, inputs: Optional[str], seed: int, batch_size: Optional[int],
                samples: Optional[list] = None, dims: Optional[Mapping[str, int]] = None,
                vocab_size: Optional[int] = None) -> list:
    """The feeds one model runs on, as a list of samples (name -> array):
    the user's samples, each checked against the model's inputs, or one
    seeded random sample (the same for two models with the same inputs),
    named dynamic dims sized by `dims`."""
    specs = input_specs(path)
    if inputs is None:
        return [random_feeds(specs, seed=seed, batch_size=batch_size, vocab_size=vocab_size, dims=dims)]
    if dims or vocab_size is not None:
        raise Error("--dim and --vocab-size size random inputs: give them or --inputs, not both")
    samples = samples if samples is not None else load_samples(inputs, specs)
    if not samples:
        raise Error(f"--inputs {inputs}: no samples in it")
    return [validate_feeds(specs, feed, f"model {label} ({path}), {getattr(feed, 'source', f'inputs sample {k + 1}')}")
            for k, feed in enumerate(samples)]
