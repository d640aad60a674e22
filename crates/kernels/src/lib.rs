//! TensorForge kernels (in progress).
