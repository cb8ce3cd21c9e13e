//! Kernel benchmark: the GPU matmul family at 256³ and 512³ on the default adapter
//! (`WGPU_BACKEND` picks the backend), next to a CPU GEMM (`gemm` crate, f32, all cores) on the
//! same shape in the same run, so the ratio is not skewed by a noisy machine.
//!
//! GPU time is the device time of one compute pass holding a batch of dispatches (timestamps
//! where the adapter has them); uploads and readback are excluded. `gpu_forward` is
//! `matmul_forward` with the kernel the library picks (2·n³ flops), `gpu_backward` is
//! `matmul_backward` without bias (dinp and dweight, 4·n³ flops), and `gpu_forward_buffer`,
//! `gpu_forward_texture` and `gpu_forward_subgroup` (where the device has 8-lane subgroups)
//! force each kernel. `gpu_forward_bf16` is the packed-bf16 forward (`Linear::new(Precision::
//! Bf16)`, 2-byte operands, f32 accumulation) with the kernel the library picks, and
//! `gpu_forward_bf16_buffer` with the buffer kernel. After each shape a summary line gives
//! median GFLOP/s, the GPU/CPU ratio and the adapter. On a CPU adapter the line adds a figure
//! on a CPU-time basis (flops per process CPU-second × cores, Linux only), which other
//! processes competing for the cores do not skew.
//!
//! Run: `cargo bench --bench kernels` (add `WGPU_BACKEND=gl` for the GL backend). A real GPU
//! needs larger shapes to fill it: `TRIAXIS_BENCH_SIZES=512,2048,4096` (multiples of 64).

use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use triaxis::gpu::{AdapterChoice, Gpu, View};
use triaxis::kernels::matmul::{self, Kernel, Linear};
use triaxis::kernels::Dispatch;
use triaxis::precision::Precision;
use triaxis::rng::Rng;

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Matmuls recorded into one pass per measured iteration.
const BATCH: usize = 8;
const SIZES: [usize; 2] = [256, 512];

/// The square sizes to run: `TRIAXIS_BENCH_SIZES` (comma list of multiples of 64) or `SIZES`.
fn sizes() -> Result<Vec<usize>, String> {
    let Ok(list) = std::env::var("TRIAXIS_BENCH_SIZES") else {
        return Ok(SIZES.to_vec());
    };
    list.split(',')
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 && n % 64 == 0 && n <= 16384 => Ok(n),
            _ => Err(format!(
                "TRIAXIS_BENCH_SIZES: {s:?} is not a multiple of 64 from 64 to 16384"
            )),
        })
        .collect()
}

/// What one benchmark measured: GFLOP/s of every iteration, and flops per CPU-second.
struct Rates {
    per_iter: Vec<f64>,
    flops: f64,
    cpu_s: f64,
}

impl Rates {
    fn median(&self) -> f64 {
        let mut v = self.per_iter.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }
    /// GFLOP/s if every core were ours: flops per process CPU-second × cores.
    fn cpu_basis(&self) -> Option<f64> {
        let cores = std::thread::available_parallelism().ok()?.get() as f64;
        (self.cpu_s > 0.0).then(|| self.flops / self.cpu_s * cores / 1e9)
    }
}

/// User + system CPU time of this process (all threads, so lavapipe's workers too), in seconds.
fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ is 100 on Linux
}

/// A kernel's median GFLOP/s, or "n/a" where the adapter cannot run it.
fn median_or_na(r: &Option<Rates>) -> String {
    r.as_ref()
        .map_or("n/a".into(), |r| format!("{:.1}", r.median()))
}

fn upload(g: &Gpu, rng: &mut Rng, len: usize) -> View {
    let v = g.buffer("bench", len);
    g.upload(&v, &rng.vec(len, 1.0)).expect("upload");
    v
}

/// Benchmarks one pass of `ops` (`flops` in total) as `name`.
fn bench_gpu(
    group: &mut Group,
    g: &Gpu,
    name: &str,
    n: usize,
    ops: &[Dispatch],
    flops: f64,
) -> Rates {
    g.run(ops).expect("warm-up"); // compiles the pipelines outside the measurement
    g.sync().expect("sync");
    let mut r = Rates {
        per_iter: Vec::new(),
        flops: 0.0,
        cpu_s: 0.0,
    };
    group.throughput(Throughput::Elements(flops as u64));
    group.bench_function(BenchmarkId::new(name, n), |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let c0 = process_cpu_s();
                let t = g.run_timed(ops).expect("GPU run");
                if let (Some(c0), Some(c1)) = (c0, process_cpu_s()) {
                    r.cpu_s += c1 - c0;
                    r.flops += flops;
                }
                r.per_iter.push(flops / t.as_secs_f64().max(1e-9) / 1e9);
                total += t;
            }
            total
        })
    });
    r
}

/// C[n,n] = A[n,n] · B[n,n]ᵀ on the CPU with all cores (the forward layout).
fn bench_cpu(group: &mut Group, rng: &mut Rng, n: usize) -> Rates {
    let (a, b) = (rng.vec(n * n, 1.0), rng.vec(n * n, 1.0));
    let mut c = vec![0.0f32; n * n];
    let flops = 2.0 * (n * n * n) as f64;
    let mut r = Rates {
        per_iter: Vec::new(),
        flops: 0.0,
        cpu_s: 0.0,
    };
    group.throughput(Throughput::Elements(flops as u64));
    group.bench_function(BenchmarkId::new("cpu_gemm", n), |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t0 = Instant::now();
                // SAFETY: a, b and c each hold n×n f32 and the strides stay inside them;
                // c aliases neither a nor b.
                unsafe {
                    gemm::gemm(
                        n,
                        n,
                        n,
                        c.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        n as isize,
                        b.as_ptr(),
                        n as isize,
                        1,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::Rayon(0),
                    );
                }
                let t = t0.elapsed();
                r.per_iter.push(flops / t.as_secs_f64().max(1e-9) / 1e9);
                total += t;
            }
            total
        })
    });
    std::hint::black_box(&c);
    r
}

/// `ops` repeated until the pass holds `BATCH` matmuls (`per` matmuls in one copy of `ops`).
fn batch(ops: &[Dispatch], per: usize) -> Vec<Dispatch> {
    let copies = BATCH.div_ceil(per);
    ops.iter()
        .cycle()
        .take(copies * ops.len())
        .cloned()
        .collect()
}

fn main() {
    let sizes = match sizes() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let g = match AdapterChoice::from_env().and_then(|ch| Gpu::open(&ch)) {
        Ok(g) => g,
        Err(e) => {
            println!("SKIP kernels benchmark: no GPU adapter ({e})");
            return;
        }
    };
    let adapter = g.adapter_name();
    let software = g.info.device_type == wgpu::DeviceType::Cpu;
    println!(
        "adapter: {adapter} ({:?}, timestamps: {})",
        g.info.device_type,
        if g.has_timestamps() {
            "yes"
        } else {
            "no, wall clock"
        }
    );
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut rng = Rng::new(7);
    let mut summary = Vec::new();
    for n in sizes {
        let [x, w, dout] = [0; 3].map(|_| upload(&g, &mut rng, n * n));
        let [out, dinp, dw] = ["out", "dinp", "dweight"].map(|l| g.buffer(l, n * n));
        let forward = |k| {
            matmul::matmul_forward(
                &g,
                Linear::new(Precision::F32).with(k),
                &out,
                &x,
                &w,
                None,
                n,
                n,
                n,
            )
        };
        let fwd = forward(Kernel::Auto).expect("forward ops");
        let fwd_buf = forward(Kernel::Buffer).expect("forward ops");
        let fwd_tex = forward(Kernel::Texture).ok();
        let fwd_sg = forward(Kernel::Subgroup).ok();
        // packed bf16: n·n elements are n·n/2 words
        let [xh, wh] = [0; 2].map(|_| {
            let v = g.buffer("bench.bf16", n * n / 2);
            let words = triaxis::cpu::pack_bf16(&rng.vec(n * n, 1.0));
            g.upload(&v, &words).expect("upload");
            v
        });
        let outh = g.buffer("out.bf16", n * n / 2);
        let forward_bf16 = |k| {
            let l = Linear::new(Precision::Bf16).with(k);
            matmul::matmul_forward(&g, l, &outh, &xh, &wh, None, n, n, n)
        };
        let fwd_bf16 = forward_bf16(Kernel::Auto).expect("bf16 forward ops");
        let fwd_bf16_buf = forward_bf16(Kernel::Buffer).expect("bf16 forward ops");
        let bwd = matmul::matmul_backward(
            &g,
            Linear::new(Precision::F32),
            &dinp,
            &dw,
            None,
            &dout,
            &x,
            &w,
            n,
            n,
            n,
        )
        .expect("backward ops");
        let flops = 2.0 * (n * n * n) as f64;
        let fb = flops * BATCH as f64;

        let mut group = c.benchmark_group("matmul");
        group.sampling_mode(SamplingMode::Flat);
        let gf = bench_gpu(&mut group, &g, "gpu_forward", n, &batch(&fwd, 1), fb);
        // One backward call is two matmuls (dinp, dweight): BATCH / 2 calls per pass.
        let gb = bench_gpu(&mut group, &g, "gpu_backward", n, &batch(&bwd, 2), fb);
        let gbuf = bench_gpu(
            &mut group,
            &g,
            "gpu_forward_buffer",
            n,
            &batch(&fwd_buf, 1),
            fb,
        );
        let gtex = fwd_tex.map(|ops| {
            bench_gpu(
                &mut group,
                &g,
                "gpu_forward_texture",
                n,
                &batch(&ops, 1),
                fb,
            )
        });
        let gsg = fwd_sg.map(|ops| {
            bench_gpu(
                &mut group,
                &g,
                "gpu_forward_subgroup",
                n,
                &batch(&ops, 1),
                fb,
            )
        });
        let gbf = bench_gpu(
            &mut group,
            &g,
            "gpu_forward_bf16",
            n,
            &batch(&fwd_bf16, 1),
            fb,
        );
        let gbf_buf = bench_gpu(
            &mut group,
            &g,
            "gpu_forward_bf16_buffer",
            n,
            &batch(&fwd_bf16_buf, 1),
            fb,
        );
        let cpu = bench_cpu(&mut group, &mut rng, n);
        group.finish();

        let (gf_m, cpu_m) = (gf.median(), cpu.median());
        let mut line = format!(
            "matmul {n}³ on {adapter}: GPU forward {gf_m:.1} GFLOP/s, backward {:.1}, \
             forward buffer kernel {:.1}, texture kernel {}, subgroup kernel {}; bf16 forward \
             {:.1} (buffer kernel {:.1}); CPU gemm {cpu_m:.1} GFLOP/s; GPU/CPU {:.3}",
            gb.median(),
            gbuf.median(),
            median_or_na(&gtex),
            median_or_na(&gsg),
            gbf.median(),
            gbf_buf.median(),
            gf_m / cpu_m,
        );
        if software {
            if let (Some(f), Some(b)) = (gf.cpu_basis(), gb.cpu_basis()) {
                line += &format!(" [CPU-time basis: forward {f:.1}, backward {b:.1} GFLOP/s]");
            }
        }
        println!("{line}");
        summary.push(line);
    }
    c.final_summary();
    println!("\nsummary (medians, GFLOP/s = 2·n³ per matmul / device time):");
    for line in summary {
        println!("  {line}");
    }
}
