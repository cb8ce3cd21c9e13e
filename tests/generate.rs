//! What the examples report after training — greedy completions (`Trainer::generate`) and the
//! exact match on held-out addition (`Trainer::addition_accuracy`) — held to an independent
//! greedy decoder on the CPU twin of the model, on a tiny model trained for a few steps.

mod common;
mod twins;

use triaxis::cpu::AdamW;
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::gpu;
use triaxis::model::{GptConfig, Micro};
use triaxis::step::TrainConfig;
use triaxis::train::Trainer;
use twins::cpu_model;

fn corpus() -> Corpus {
    Corpus::addition(AdditionSpec {
        digits: 2,
        train_problems: 2000,
        val_problems: 40,
        seed: 3,
        reverse: true,
        pad: false,
    })
    .unwrap()
}

/// 2 layers of 32 channels, windows of 8 tokens (a prompt such as `12+34=` plus its answer
/// runs past the window: generation then slides it), 4 rows per microbatch.
fn cfg(vocab: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab,
            ctx: 8,
            channels: 32,
            heads: 2,
            layers: 2,
        },
        micro: Micro { b: 4, t: 8 },
        grad_accum: 1,
        steps: 150,
        adam: AdamW {
            lr: 1e-2,
            ..Default::default()
        },
        warmup: 5,
        min_lr_frac: 0.1,
        seed: 9,
    }
}

/// A trainer after 150 steps: the format (`=`, digits, newline) learnt, the sums not yet.
fn trained(corpus: &Corpus) -> Option<Trainer> {
    let gpus = gpu::test_gpus(1)?;
    let cfg = cfg(corpus.vocab.size());
    let mut t = Trainer::new(&gpus[0], cfg.clone()).unwrap();
    let mut b = Batcher::new(5);
    for s in 0..cfg.steps {
        let batch = corpus.train_batch(&mut b, cfg.micro).unwrap();
        t.step(&[batch], s).unwrap();
    }
    Some(t)
}

/// Greedy decoding on the CPU twin: the next token is the one whose loss as the target after
/// the window's last token is smallest (all candidates in one batch of `vocab` rows); the
/// window keeps the last `t` tokens, zero-padded after them.
fn cpu_greedy(t: &Trainer, prompt: &[u32], max_new: usize, stop: Option<u32>) -> Vec<u32> {
    let cfg = &t.cfg.model;
    let (v, w) = (cfg.vocab, t.cfg.micro.t);
    let layout = cfg.layout(&cfg.blocks());
    let params = t.state().unwrap().params;
    let mut grads = vec![0.0f32; layout.total];
    let mut row = prompt.to_vec();
    for _ in 0..max_new {
        let keep = &row[row.len().saturating_sub(w)..];
        let pos = keep.len() - 1;
        let (mut x, mut y) = (vec![0u32; v * w], vec![0u32; v * w]);
        for j in 0..v {
            x[j * w..j * w + keep.len()].copy_from_slice(keep);
            y[j * w + pos] = j as u32;
        }
        let micro = Micro { b: v, t: w };
        let losses =
            cpu_model::forward_backward(cfg, &layout, &params, &mut grads, &x, &y, micro, 0.0)
                .unwrap();
        let next = (0..v).fold(0, |best, j| {
            if losses[j * w + pos] < losses[best * w + pos] {
                j
            } else {
                best
            }
        }) as u32;
        row.push(next);
        if Some(next) == stop {
            break;
        }
    }
    row[prompt.len()..].to_vec()
}

#[test]
fn greedy_generation_is_the_cpu_twins_greedy_decoding() {
    let c = corpus();
    let Some(mut t) = trained(&c) else {
        return;
    };
    let newline = c.vocab.encode("\n").unwrap()[0];
    // 10 prompts: more than the 4 rows of a microbatch, so they go 4, 4, 2
    let prompts: Vec<Vec<u32>> = c.val_problems[..10]
        .iter()
        .map(|(p, _)| c.vocab.encode(p).unwrap())
        .collect();
    for (max_new, stop) in [(7, None), (12, Some(newline))] {
        let got = t.generate(&prompts, max_new, stop).unwrap();
        for (p, g) in prompts.iter().zip(&got) {
            let want = cpu_greedy(&t, p, max_new, stop);
            println!(
                "{:>7} → {:?} (stop {stop:?})",
                c.vocab.decode(p),
                c.vocab.decode(g)
            );
            assert_eq!(
                g,
                &want,
                "prompt {:?}, {max_new} tokens, stop {stop:?}",
                c.vocab.decode(p)
            );
            match stop {
                None => assert_eq!(g.len(), max_new),
                Some(s) => assert!(g.len() == max_new || g.last() == Some(&s)),
            }
        }
    }
    assert!(t.generate(&[vec![]], 3, None).is_err(), "an empty prompt");
}

#[test]
fn exact_match_counts_completions_that_equal_the_answer_and_end_the_line() {
    let mut c = corpus();
    let Some(mut t) = trained(&c) else {
        return;
    };
    let newline = c.vocab.encode("\n").unwrap()[0];
    // the problems' answers made to be the model's own completion for every other problem, so
    // the expected count is known and neither none nor all
    let mut problems = c.val_problems[..12].to_vec();
    let (mut want, mut first_right) = (0, false);
    for (i, (prompt, answer)) in problems.iter_mut().enumerate() {
        let out = cpu_greedy(&t, &c.vocab.encode(prompt).unwrap(), 12, Some(newline));
        let text = c.vocab.decode(&out);
        let ended = text.ends_with('\n');
        if i % 2 == 0 && ended {
            *answer = text.trim_end_matches('\n').to_string();
        }
        if i % 2 == 1 && text.trim_end_matches('\n') == answer.as_str() {
            // the model is right here: make the answer wrong
            answer.push('0');
        }
        let right = ended && text.trim_end_matches('\n') == answer.as_str();
        want += usize::from(right);
        first_right |= i == 0 && right;
    }
    c.val_problems = problems;
    assert!(
        want > 0 && want < 12,
        "{want} of 12: the format is not learnt"
    );
    let got = t.addition_accuracy(&c, 12).unwrap();
    println!("exact match {got} (expected {want}/12)");
    assert_eq!(got, want as f32 / 12.0);
    // a limit takes the first problems only
    assert_eq!(
        t.addition_accuracy(&c, 1).unwrap(),
        f32::from(u8::from(first_right))
    );
}
