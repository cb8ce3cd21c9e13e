// The texture kernels' store of C[m, n .. n+3]: element by element (store4), for any N.
fn put_c(m: u32, n: u32, v: vec4<f32>) {
    store4(m, n, v);
}
