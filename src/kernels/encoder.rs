//! encoder kernels (shaders/encoder.wgsl).
