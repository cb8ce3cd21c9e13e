//! The library's run loop, `Session::run`, as a program embedding triaxis drives it: it steps
//! to the end with the bits of `run_until`, tells its observer every step in order, stops
//! before the step its stop callback refuses (with the callback's reason), and ends at the
//! first error of a callback, the step counter where that error left it.

use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Corpus};
use triaxis::engine::{Engine, RuntimeOptions};
use triaxis::gpu::{self, Gpu};
use triaxis::mesh::Mesh;
use triaxis::model::{GptConfig, Micro};
use triaxis::session::{RunEnd, Session};
use triaxis::step::TrainConfig;
use triaxis::Error;

fn cfg() -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab: 13,
            ctx: 8,
            channels: 16,
            heads: 2,
            layers: 1,
        },
        micro: Micro { b: 2, t: 8 },
        grad_accum: 1,
        steps: 8,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 2,
        min_lr_frac: 0.1,
        seed: 9,
    }
}

fn corpus() -> Corpus {
    Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 300,
        val_problems: 20,
        seed: 3,
        reverse: true,
        pad: false,
    })
    .unwrap()
}

fn engine(g: &Gpu) -> Engine {
    let gpus = [g.clone()];
    Engine::new(&gpus, cfg(), Mesh::default(), RuntimeOptions::default()).unwrap()
}

#[test]
fn run_observes_every_step_stops_on_request_and_ends_on_an_error() {
    let Some(gpus) = gpu::test_gpus(1) else {
        return;
    };
    let c = corpus();

    // to the end: every step observed in order, the bits of run_until
    let mut reference = Session::new(engine(&gpus[0]), &c, 1);
    reference.run_until(4, |_, _| {}).unwrap();
    let mut s = Session::new(engine(&gpus[0]), &c, 1);
    let mut seen = Vec::new();
    let end = s.run(
        4,
        || Ok::<_, Error>(None::<&str>),
        |session, done| {
            assert_eq!(session.step, done.step + 1);
            assert!(done.costs.stats.loss.is_finite() && done.seconds >= 0.0);
            seen.push(done.step);
            Ok(())
        },
    );
    assert_eq!(end.unwrap(), RunEnd::Reached);
    assert_eq!(seen, [0, 1, 2, 3]);
    assert_eq!(
        s.engine.checksum().unwrap(),
        reference.engine.checksum().unwrap()
    );

    // a stop request before step 2: two steps taken, the reason handed back
    let mut s = Session::new(engine(&gpus[0]), &c, 1);
    let mut asked = 0;
    let end = s.run(
        4,
        || {
            asked += 1;
            Ok::<_, Error>((asked == 3).then_some("SIGINT"))
        },
        |_, _| Ok(()),
    );
    assert_eq!(end.unwrap(), RunEnd::Stopped("SIGINT"));
    assert_eq!(s.step, 2);

    // an observer's error after step 1 ends the run there
    let mut s = Session::new(engine(&gpus[0]), &c, 1);
    let end = s.run(
        4,
        || Ok::<_, Error>(None::<()>),
        |_, done| match done.step {
            1 => Err(Error::Config("the observer failed".into())),
            _ => Ok(()),
        },
    );
    assert!(matches!(end, Err(Error::Config(m)) if m == "the observer failed"));
    assert_eq!(s.step, 2);
}
