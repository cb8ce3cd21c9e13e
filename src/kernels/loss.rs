//! loss kernels (shaders/loss.wgsl).
