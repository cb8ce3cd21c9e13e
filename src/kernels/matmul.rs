//! matmul kernels (shaders/matmul.wgsl).
