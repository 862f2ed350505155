"""verify: runs an original and an optimized model on the same inputs and compares them."""
