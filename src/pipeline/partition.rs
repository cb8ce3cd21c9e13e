//! Splitting the model's blocks into pipeline stages: contiguous ranges, embedding in the first,
//! head in the last, balanced by parameter count (default) or by measured per-block time.
//!
//! ```text
//! blocks:  [emb][h0][h1][h2][h3][h4][h5][head]      weights w_i
//! stages:  [emb  h0][h1  h2][h3  h4][h5  head]      minimise max_s Σ_{i∈s} w_i (exact DP)
//! ```

use std::ops::Range;

use crate::error::{Error, Result};
use crate::model::{Block, GptConfig};

/// How to weigh blocks when balancing stages.
#[derive(Clone, Debug, PartialEq)]
pub enum Balance {
    /// By parameter count.
    Params,
    /// By measured time per block (seconds, one per block of `cfg.blocks()`).
    Time(Vec<f64>),
}

/// Splits `weights` into `k` contiguous non-empty groups minimising the largest group sum
/// (ties: the earliest split). Exact dynamic programme, O(k·n²).
pub fn partition(weights: &[f64], k: usize) -> Result<Vec<Range<usize>>> {
    let n = weights.len();
    if k == 0 {
        return Err(Error::Config(
            "the number of stages must be at least 1".into(),
        ));
    }
    if k > n {
        return Err(Error::Config(format!(
            "{k} pipeline stages but the model has only {n} blocks (embedding, layers, head): use fewer stages or more layers"
        )));
    }
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return Err(Error::Config(
            "block weights must be finite and non-negative".into(),
        ));
    }
    let prefix: Vec<f64> = std::iter::once(0.0)
        .chain(weights.iter().scan(0.0, |s, w| {
            *s += w;
            Some(*s)
        }))
        .collect();
    let sum = |a: usize, b: usize| prefix[b] - prefix[a];
    // best[j][i]: smallest max-sum splitting the first i blocks into j groups; cut[j][i]: last cut
    let mut best = vec![vec![f64::INFINITY; n + 1]; k + 1];
    let mut cut = vec![vec![0usize; n + 1]; k + 1];
    best[0][0] = 0.0;
    for j in 1..=k {
        for i in j..=n {
            for c in (j - 1)..i {
                let cost = best[j - 1][c].max(sum(c, i));
                if cost < best[j][i] {
                    best[j][i] = cost;
                    cut[j][i] = c;
                }
            }
        }
    }
    let mut ranges = Vec::with_capacity(k);
    let mut end = n;
    for j in (1..=k).rev() {
        let start = cut[j][end];
        ranges.push(start..end);
        end = start;
    }
    ranges.reverse();
    Ok(ranges)
}

/// The blocks of each of `stages` stages.
pub fn stage_blocks(cfg: &GptConfig, stages: usize, balance: &Balance) -> Result<Vec<Vec<Block>>> {
    cfg.validate()?;
    let blocks = cfg.blocks();
    let weights: Vec<f64> = match balance {
        Balance::Params => blocks
            .iter()
            .map(|b| cfg.layout(&[*b]).count() as f64)
            .collect(),
        Balance::Time(t) if t.len() == blocks.len() => t.clone(),
        Balance::Time(t) => {
            return Err(Error::Config(format!(
                "{} block times for {} blocks",
                t.len(),
                blocks.len()
            )))
        }
    };
    Ok(partition(&weights, stages)?
        .into_iter()
        .map(|r| blocks[r].to_vec())
        .collect())
}

/// The stage blocks a pipeline of `stages` stages would use (for reports).
pub fn describe_stages(cfg: &GptConfig, stages: &[Vec<Block>]) -> Vec<String> {
    stages
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let names: Vec<String> = b.iter().map(|x| x.short_name()).collect();
            format!(
                "stage {i}: {} ({} params)",
                names.join(" "),
                cfg.layout(b).count()
            )
        })
        .collect()
}
