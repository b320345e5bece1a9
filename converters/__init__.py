"""Framework front-ends (TensorFlow, PyTorch). The only code that imports them."""
