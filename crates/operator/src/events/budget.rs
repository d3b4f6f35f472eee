//! The budgets of the skip Events: a token bucket per key (a namespace, a source address of the
//! admission requests), of bounded memory.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A token bucket: `burst` tokens, refilled at one per `every`.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    pub burst: u32,
    pub every: Duration,
}

/// Skip Events recorded per namespace: a burst of 20, then one every 10 s (6 a minute).
pub const PER_NAMESPACE: Rate = Rate {
    burst: 20,
    every: Duration::from_secs(10),
};

/// Skip notices accepted per source address of the admission requests: a burst of 200, then 2
/// a second. The API server is one source for every legitimate request; anything else that
/// reaches the webhook port is another, and cannot spend the API server's budget.
pub const PER_SOURCE: Rate = Rate {
    burst: 200,
    every: Duration::from_millis(500),
};

/// Keys (namespaces, sources) a [`Buckets`] remembers: beyond this, a key not seen yet gets no
/// token until buckets refill (a forged review can name any number of namespaces).
const BUCKETS_KEPT: usize = 10_000;

/// The tokens of a bucket that held `at.0` at `at.1`, at `now`.
fn refill(rate: Rate, at: (f64, Instant), now: Instant) -> f64 {
    let refilled = now.saturating_duration_since(at.1).as_secs_f64()
        / rate.every.as_secs_f64().max(f64::MIN_POSITIVE);
    (at.0 + refilled).min(f64::from(rate.burst))
}

/// One token bucket per key (a namespace, a source address), of bounded memory.
#[derive(Debug)]
pub struct Buckets {
    rate: Rate,
    /// Key → (tokens, when they were counted).
    buckets: HashMap<String, (f64, Instant)>,
}

impl Buckets {
    pub fn new(rate: Rate) -> Self {
        Buckets {
            rate,
            buckets: HashMap::new(),
        }
    }

    fn tokens(&self, at: (f64, Instant), now: Instant) -> f64 {
        refill(self.rate, at, now)
    }

    /// Takes a token of `key` at `now`: false when it has none left.
    pub fn take(&mut self, key: &str, now: Instant) -> bool {
        if !self.buckets.contains_key(key) && self.buckets.len() >= BUCKETS_KEPT {
            // Full buckets are the same as no bucket: forget them.
            let burst = f64::from(self.rate.burst);
            let rate = self.rate;
            self.buckets.retain(|_, b| refill(rate, *b, now) < burst);
            if self.buckets.len() >= BUCKETS_KEPT {
                return false;
            }
        }
        let current = self
            .buckets
            .get(key)
            .map_or(f64::from(self.rate.burst), |b| self.tokens(*b, now));
        if current < 1.0 {
            self.buckets.insert(key.to_string(), (current, now));
            return false;
        }
        self.buckets.insert(key.to_string(), (current - 1.0, now));
        true
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_give_a_burst_then_the_rate_per_key_within_bounded_memory() {
        let rate = Rate {
            burst: 3,
            every: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let mut b = Buckets::new(rate);
        // (key, seconds after t0, token given)
        let cases = [
            ("a", 0, true),
            ("a", 0, true),
            ("a", 0, true),
            ("a", 1, false),
            ("b", 1, true),
            ("a", 9, false),
            ("a", 11, true),
            ("a", 12, false),
            ("a", 45, true),
            ("a", 45, true),
            ("a", 45, true),
            ("a", 45, false),
        ];
        for (i, (key, secs, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                b.take(key, t0 + Duration::from_secs(secs)),
                want,
                "case {i}"
            );
        }
        // Keys beyond the bound get nothing until buckets refill (then they are forgotten).
        let mut many = Buckets::new(rate);
        for i in 0..BUCKETS_KEPT {
            assert!(many.take(&format!("ns-{i}"), t0));
        }
        assert!(!many.take("one-more", t0));
        assert!(many.take("one-more", t0 + Duration::from_secs(31)));
        assert!(many.len() <= BUCKETS_KEPT);
    }
}
