//! optim kernels (shaders/optim.wgsl).
