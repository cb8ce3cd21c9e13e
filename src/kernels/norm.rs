//! norm kernels (shaders/norm.wgsl).
