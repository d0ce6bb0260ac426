"""Install NVIDIA cuDNN from an archive into a CUDA toolkit, configure Theano, verify it."""
__version__ = "0.1.0"
