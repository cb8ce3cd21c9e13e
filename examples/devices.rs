//! Lists every adapter wgpu finds on every backend, with what triaxis cares about.
//! `cargo run --example devices` (set WGPU_BACKEND=vulkan|gl|… to restrict).

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let backends = triaxis::gpu::backends_from_env()?;
    let list = triaxis::gpu::list_adapters(backends);
    if list.is_empty() {
        anyhow::bail!("no GPU adapter found: install a Vulkan driver (mesa-vulkan-drivers) or try WGPU_BACKEND=gl");
    }
    println!(
        "{:<3} {:<36} {:<8} {:<13} {:<30} {:>5} {:>4} {:>9} {:>12} {:>10}",
        "#",
        "name",
        "backend",
        "type",
        "driver",
        "ts",
        "f16",
        "subgroup",
        "max binding",
        "max buffer"
    );
    for a in &list {
        let sg = if a.subgroups {
            format!("{}..{}", a.subgroup_size.0, a.subgroup_size.1)
        } else {
            "no".into()
        };
        let driver = format!("{} {}", a.driver, a.driver_info);
        println!(
            "{:<3} {:<36} {:<8} {:<13} {:<30} {:>5} {:>4} {:>9} {:>8} MiB {:>6} MiB",
            a.index,
            truncate(&a.name, 36),
            a.backend,
            a.device_type,
            truncate(&driver, 30),
            if a.timestamps { "yes" } else { "no" },
            if a.shader_f16 { "yes" } else { "no" },
            sg,
            a.max_storage_binding >> 20,
            a.max_buffer >> 20,
        );
    }
    println!("\npick one with --adapter N in the examples, or WGPU_BACKEND=vulkan|gl|metal|dx12");
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}
