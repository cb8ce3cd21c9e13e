//! Which adapter the GPU tests run on, checked against what CI expects of each pass
//! (`TRIAXIS_EXPECT_BACKEND`: `vulkan` for lavapipe, `gl` for llvmpipe), so a failed Vulkan
//! install cannot silently run the GL adapter twice; and no run prints lavapipe's
//! XDG_RUNTIME_DIR complaint when the variable is unset.

mod common;

use triaxis::gpu;

#[test]
fn the_tests_run_on_the_backend_this_pass_expects() {
    let Some(g) = gpu::test_gpu() else {
        return;
    };
    let got = format!("{:?}", g.info.backend);
    println!("GPU tests run on {} / {got}", g.info.name);
    match std::env::var("TRIAXIS_EXPECT_BACKEND") {
        Ok(want) if !want.is_empty() => assert!(
            got.eq_ignore_ascii_case(&want),
            "this pass expects the {want} backend but the tests run on {got}"
        ),
        _ => println!("(no TRIAXIS_EXPECT_BACKEND set: nothing to compare)"),
    }
}

#[test]
fn an_unset_xdg_runtime_dir_is_replaced_by_a_private_one() {
    let dir = common::example::scratch_dir("xdg");
    let Some(mut cmd) = common::example::example("devices", &dir, &[]) else {
        return;
    };
    let out = cmd
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("devices starts");
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("XDG_RUNTIME_DIR"),
        "the adapter complained about XDG_RUNTIME_DIR: {err}"
    );
}
