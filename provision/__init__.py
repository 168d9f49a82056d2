"""provision: from a cited TensorFlow/CUDA/cuDNN matrix to a locked, built, verified environment."""

__version__ = "0.1.0"
