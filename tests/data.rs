//! Corpus generation, batching, dataset versions and bad-input errors (no GPU needed).
use triaxis::data::{AdditionSpec, Batcher, Corpus};
use triaxis::model::Micro;
use triaxis::Error;

fn small() -> AdditionSpec {
    AdditionSpec {
        digits: 3,
        train_problems: 500,
        val_problems: 50,
        seed: 7,
        reverse: false,
        pad: false,
    }
}

#[test]
fn addition_corpus_is_deterministic_correct_and_held_out() {
    let a = Corpus::addition(small()).unwrap();
    let b = Corpus::addition(small()).unwrap();
    assert_eq!(a.train, b.train);
    assert_eq!(a.version, b.version);
    assert!(a.version.starts_with("sha256:") && a.version.len() == 7 + 64);
    let other = Corpus::addition(AdditionSpec { seed: 8, ..small() }).unwrap();
    assert_ne!(
        a.version, other.version,
        "a different generator seed is a different dataset"
    );
    let text = a.vocab.decode(&a.train);
    assert_eq!(text.lines().count(), 500);
    for line in text.lines() {
        let (lhs, sum) = line.split_once('=').unwrap();
        let (x, y) = lhs.split_once('+').unwrap();
        assert_eq!(
            x.parse::<u64>().unwrap() + y.parse::<u64>().unwrap(),
            sum.parse::<u64>().unwrap(),
            "{line}"
        );
    }
    assert_eq!(a.val_problems.len(), 50);
    let train_lines: std::collections::HashSet<&str> = text.lines().collect();
    for (p, ans) in &a.val_problems {
        assert!(
            !train_lines.contains(format!("{p}{ans}").as_str()),
            "{p}{ans} leaked into training"
        );
    }
}

#[test]
fn reversed_sums_are_written_least_significant_digit_first() {
    let c = Corpus::addition(AdditionSpec {
        reverse: true,
        ..small()
    })
    .unwrap();
    for line in c.vocab.decode(&c.train).lines() {
        let (lhs, sum) = line.split_once('=').unwrap();
        let (x, y) = lhs.split_once('+').unwrap();
        let plain: String = sum.chars().rev().collect();
        assert_eq!(
            x.parse::<u64>().unwrap() + y.parse::<u64>().unwrap(),
            plain.parse::<u64>().unwrap(),
            "{line}"
        );
    }
    assert_ne!(c.version, Corpus::addition(small()).unwrap().version);
}

#[test]
fn fixed_width_problems_put_every_digit_at_one_offset() {
    let spec = AdditionSpec {
        reverse: true,
        pad: true,
        ..small()
    };
    let c = Corpus::addition(spec).unwrap();
    // 3 + 1 + 3 + 1 + 4 characters and the newline
    let text = c.vocab.decode(&c.train);
    for line in text.lines() {
        assert_eq!(line.len(), 12, "{line}");
        assert_eq!((&line[3..4], &line[7..8]), ("+", "="), "{line}");
        let plain: String = line[8..].chars().rev().collect();
        let (x, y) = (&line[..3], &line[4..7]);
        assert_eq!(
            x.parse::<u64>().unwrap() + y.parse::<u64>().unwrap(),
            plain.parse::<u64>().unwrap(),
            "{line}"
        );
    }
    // short operands are there, written with leading zeros
    assert!(
        text.lines().any(|l| l.starts_with("00")),
        "no 1-digit operand"
    );
    for (prompt, answer) in &c.val_problems {
        assert_eq!((prompt.len(), answer.len()), (8, 4), "{prompt}{answer}");
    }
    let starts = &c.train_starts;
    assert!(
        starts.windows(2).all(|w| w[1] - w[0] == 13),
        "a line and its newline"
    );
    // the varying-width corpus is another dataset, and keeps the version it always had
    assert_ne!(
        c.version,
        Corpus::addition(AdditionSpec { pad: false, ..spec })
            .unwrap()
            .version
    );
}

#[test]
fn batches_are_seeded_and_shifted() {
    let c = Corpus::addition(small()).unwrap();
    let m = Micro { b: 3, t: 10 };
    let (x1, y1) = Batcher::new(5).next(&c.train, m).unwrap();
    let (x2, _) = Batcher::new(5).next(&c.train, m).unwrap();
    assert_eq!(x1, x2);
    assert_eq!(x1.len(), 30);
    for r in 0..3 {
        assert_eq!(
            &x1[r * 10 + 1..r * 10 + 10],
            &y1[r * 10..r * 10 + 9],
            "targets are inputs shifted by one"
        );
    }
    let (x3, _) = Batcher::new(6).next(&c.train, m).unwrap();
    assert_ne!(x1, x3);
    // aligned windows start right after a newline (or at 0)
    let newline = c.vocab.encode("\n").unwrap()[0];
    let mut b = Batcher::new(7);
    for _ in 0..20 {
        let (x, _) = c.train_batch(&mut b, m).unwrap();
        for r in 0..3 {
            let first = x[r * 10];
            assert!(
                first != newline && first != c.vocab.encode("+").unwrap()[0],
                "window starts mid-problem"
            );
        }
    }
}

#[test]
fn text_file_errors_are_clear() {
    let dir = std::env::temp_dir().join(format!("triaxis-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = Corpus::text_file(&dir.join("nope.txt"), 0.1).unwrap_err();
    assert!(
        matches!(missing, Error::Data(_)) && missing.to_string().contains("cannot read"),
        "{missing}"
    );
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let e = Corpus::text_file(&empty, 0.1).unwrap_err();
    assert!(e.to_string().contains("is empty"), "{e}");
    let short = dir.join("short.txt");
    std::fs::write(&short, "hello world, this is short").unwrap();
    let c = Corpus::text_file(&short, 0.1).unwrap();
    let e = c.check_context(64).unwrap_err();
    assert!(e.to_string().contains("shorten the context"), "{e}");
    assert_eq!(c.vocab.size(), 256);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shared_text_corpus_loads_when_present() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tinyshakespeare.txt");
    if !path.exists() {
        // a user's clone has no shared corpus; CI has one beside the checkout
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing under CI",
            path.display()
        );
        eprintln!("SKIP: {} not present", path.display());
        return;
    }
    let c = Corpus::text_file(&path, 0.1).unwrap();
    assert!(c.train.len() > 1_000_000 && c.val.len() > 100_000);
    c.check_context(256).unwrap();
}

#[test]
fn uniform_corpus_covers_its_vocabulary_and_refuses_bad_sizes() {
    let c = Corpus::uniform(16, 20_000, 3).unwrap();
    assert_eq!(c.vocab.size(), 16);
    assert_eq!((c.train.len(), c.val.len()), (18_000, 2_000));
    let mut seen = [0usize; 16];
    for &t in c.train.iter().chain(&c.val) {
        seen[t as usize] += 1; // panics on an id outside the vocabulary
    }
    // 1,250 expected per id; a uniform draw stays well inside ±20 %
    assert!(seen.iter().all(|&n| (1000..1500).contains(&n)), "{seen:?}");
    let again = Corpus::uniform(16, 20_000, 3).unwrap();
    assert_eq!(
        (again.train, again.version),
        (c.train.clone(), c.version.clone())
    );
    assert_ne!(Corpus::uniform(16, 20_000, 4).unwrap().train, c.train);
    for (vocab, tokens) in [(1, 100), (63, 100), (16, 19)] {
        let e = Corpus::uniform(vocab, tokens, 0).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e}");
    }
}
