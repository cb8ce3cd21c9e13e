//! attention kernels (shaders/attention.wgsl).
