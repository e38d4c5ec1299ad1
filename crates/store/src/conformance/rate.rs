//! The fleet rate: admissions spaced by the rate's interval, a short burst, reservations only
//! when near, and separate keys apart.

use std::time::{Duration, Instant};

use super::{Fixture, cases};
use crate::rate::{Admission, MAX_WAIT, Rate};

cases! {
    "rate: admissions are spaced by the interval and reserved only when near" => spaced,
    "rate: two keys have rates of their own" => keys_apart,
}

/// Admissions of `n` calls at once under `rate` at `key`.
async fn admit(f: &Fixture, key: &str, rate: Rate, n: usize) -> Vec<Admission> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(f.store.admit(key, rate).await.unwrap());
    }
    out
}

/// One admission, with when the call was made and answered (the store decided in between).
struct Stamped {
    asked: Instant,
    answered: Instant,
    admission: Admission,
}

impl Stamped {
    /// The earliest and the latest the instant it names can be.
    fn names(&self) -> (Instant, Instant) {
        let (Admission::After(d) | Admission::Later(d)) = self.admission;
        (self.asked + d, self.answered + d)
    }
}

/// Calls back to back until one is not reserved (at most 40).
async fn until_later(f: &Fixture, key: &str, rate: Rate) -> Vec<Stamped> {
    let mut out: Vec<Stamped> = Vec::new();
    while out.len() < 40
        && !matches!(out.last(), Some(s) if matches!(s.admission, Admission::Later(_)))
    {
        let asked = Instant::now();
        let admission = f.store.admit(key, rate).await.unwrap();
        out.push(Stamped {
            asked,
            answered: Instant::now(),
            admission,
        });
    }
    out
}

async fn spaced(f: Fixture) {
    let rate = Rate {
        count: 10,
        per: Duration::from_secs(1),
    };
    let interval = Duration::from_millis(100);
    let slack = Duration::from_millis(5);
    let got = until_later(&f, &f.key("rate"), rate).await;
    let shown: Vec<Admission> = got.iter().map(|s| s.admission).collect();
    assert_eq!(
        shown[0],
        Admission::After(Duration::ZERO),
        "an idle key runs at once"
    );
    let Some(Admission::Later(last)) = shown.last().copied() else {
        panic!("a second's worth reserved, then none: {shown:?}")
    };
    assert!(last > MAX_WAIT, "{shown:?}");
    assert!(
        shown.len() >= 11,
        "ten a second, reserved up to a second ahead: {shown:?}"
    );
    // Each call's instant comes an interval after the one before: reserved back to back, and
    // the refused call names when its turn would have come.
    for pair in got.windows(2) {
        let ((early_a, late_a), (early_b, late_b)) = (pair[0].names(), pair[1].names());
        let least = early_b.saturating_duration_since(late_a);
        let most = late_b.saturating_duration_since(early_a);
        assert!(
            least <= interval + slack && interval <= most + slack,
            "not an interval apart ({least:?} to {most:?}): {shown:?}"
        );
    }
}

async fn keys_apart(f: Fixture) {
    let rate = Rate {
        count: 1,
        per: Duration::from_secs(60),
    };
    let a = admit(&f, &f.key("a"), rate, 2).await;
    let b = admit(&f, &f.key("b"), rate, 1).await;
    assert_eq!(a[0], Admission::After(Duration::ZERO));
    assert!(
        matches!(a[1], Admission::Later(d) if d > Duration::from_secs(50)),
        "{a:?}"
    );
    assert_eq!(
        b[0],
        Admission::After(Duration::ZERO),
        "another key's rate is its own"
    );
}
