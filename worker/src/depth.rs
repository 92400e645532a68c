//! Depth: how much ferry keeps in flight at once — requests to Blob storage, or files being
//! copied on a filesystem — and the controller that finds it without being told.
//!
//! Every client has a knee: below it, more in flight means more done per second (latency is
//! hidden); above it, more only queues (the server, the disk or the CPU is the limit) or
//! draws throttling. Where the knee sits depends on round-trip time, object sizes and the far
//! side, none of which ferry knows in advance. So a run starts at a default for its kind of
//! store and moves from there on what it measures:
//!
//! - *ramp*: double the limit while doubling raises the rate by at least `GAIN` (one doubling
//!   that does not is forgiven once: the moment may have been noisy);
//! - *hold*: stay at the best limit found, probing ±25 % now and then, keeping a smaller limit
//!   whenever it does as well (fewer in flight is cheaper for everyone);
//! - *throttled* (429, 503, timeouts): halve at once, whatever the rate said.
//!
//! A trial is a stretch with the limit unchanged. It starts once the requests begun under the
//! previous limit have finished (they would blur the new one's rate), and lasts until every
//! slot has turned over: once while ramping (short round trips give short trials and a fast
//! ramp), `TURNS` times while holding, `PROBE_TURNS` times in a probe, within `MIN_TRIAL` and
//! `MAX_TRIAL`: rates over a few tens of milliseconds swing by a third against a busy emulator,
//! and a probe must not be one noisy moment. Trials where the limit was not the constraint
//! (fewer tasks wanting a slot than there are slots) say nothing about the limit and are
//! discarded. A fixed `--concurrency` switches the controller off.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::documents::{Mode, Report, Step};
use crate::stats::Stats;

/// A doubling is kept if it raised the rate by this much.
const GAIN: f64 = 1.10;
/// A probe upward is kept if it raised the rate by this much ...
const PROBE_GAIN: f64 = 1.05;
/// ... and a probe downward if it kept this much of it.
const PROBE_KEEP: f64 = 0.97;
/// Trials at the best limit between two probes.
const HOLD_TRIALS: u32 = 6;
/// How many times every slot turns over in a trial held at the best limit, and in a probe.
const TURNS: u64 = 2;
const PROBE_TURNS: u64 = 4;
const MIN_TRIAL: Duration = Duration::from_millis(50);
const MAX_TRIAL: Duration = Duration::from_millis(1500);
/// What one request or file costs beyond its bytes, in bytes: the rate counts both, so that
/// tiny objects (where requests per second is what matters) and large ones (bytes per second)
/// are judged by the same number.
const OP_BYTES: f64 = 64.0 * 1024.0;
/// Trial results kept for the report.
const TRACE_MAX: usize = 64;

/// Where the controller is in its cycle: ramping up, holding the best limit, or probing
/// either side of it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Doubling; the count is of doublings in a row that gained nothing (one may be noise).
    Ramp(u8),
    Hold(u32),
    ProbeUp,
    ProbeDown,
}

struct Controller {
    min: usize,
    max: usize,
    stage: Stage,
    /// The best limit seen and its rate.
    best: Option<(usize, f64)>,
    trial_start: Instant,
    trial_ops: u64,
    trial_bytes: u64,
    trial_saturated: u64,
    /// Completions still to come before the trial's clock starts.
    settling: u64,
    throttles_seen: u64,
    /// The first trial fills the pipeline (threads start, connections open) and says nothing
    /// about the limit: it is not judged.
    warm: bool,
    trace: Vec<Step>,
}

impl Controller {
    /// How many times every slot turns over in a trial of the present stage.
    fn turns(&self) -> u64 {
        match self.stage {
            Stage::Ramp(_) => 1,
            Stage::Hold(_) => TURNS,
            Stage::ProbeUp | Stage::ProbeDown => PROBE_TURNS,
        }
    }

    /// Counts one finished slot of `bytes` (`saturated`: it was in demand) under `limit`;
    /// the limit from now on.
    fn finished(
        &mut self,
        limit: usize,
        bytes: u64,
        saturated: bool,
        throttles: u64,
        now: Instant,
        at: f64,
    ) -> usize {
        let throttled = throttles > self.throttles_seen;
        if self.settling > 0 && !throttled {
            self.settling -= 1;
            if self.settling == 0 {
                self.trial_start = now;
            }
            return limit;
        }
        self.trial_ops += 1;
        self.trial_bytes += bytes;
        self.trial_saturated += saturated as u64;
        let elapsed = now.duration_since(self.trial_start);
        let turned_over = self.trial_ops >= self.turns() * limit as u64 && elapsed >= MIN_TRIAL;
        if !(turned_over || elapsed >= MAX_TRIAL || throttled) {
            return limit;
        }
        let rate = (self.trial_bytes as f64 + self.trial_ops as f64 * OP_BYTES)
            / elapsed.as_secs_f64().max(1e-6);
        // Half the trial's slots must have been wanted for the limit to be the constraint.
        let wanted =
            2 * self.trial_saturated >= self.trial_ops && std::mem::replace(&mut self.warm, true);
        let next = if throttled || wanted {
            self.decide(limit, rate, throttled)
        } else {
            limit
        };
        if wanted || throttled {
            if self.trace.len() == TRACE_MAX {
                self.trace.remove(0);
            }
            self.trace.push(Step {
                at: (at * 1000.0).round() / 1000.0,
                limit,
                rate: rate.round(),
            });
        }
        self.throttles_seen = throttles;
        self.trial_start = now;
        self.trial_ops = 0;
        self.trial_bytes = 0;
        self.trial_saturated = 0;
        // What is in flight now began under this limit: the next trial waits for it to finish.
        if next != limit {
            self.settling = limit as u64;
        }
        next
    }

    /// The limit after a finished trial at `limit` that measured `rate`.
    fn decide(&mut self, limit: usize, rate: f64, throttled: bool) -> usize {
        if throttled {
            self.best = None;
            self.stage = Stage::Hold(HOLD_TRIALS);
            return (limit / 2).max(self.min);
        }
        let up = |l: usize| (l + (l / 4).max(1)).min(self.max);
        let down = |l: usize| (l - (l / 5).max(1)).max(self.min);
        match (self.stage, self.best) {
            (_, None) => {
                self.best = Some((limit, rate));
                if matches!(self.stage, Stage::Ramp(_)) && limit < self.max {
                    return (limit * 2).min(self.max);
                }
                self.stage = Stage::Hold(HOLD_TRIALS);
                limit
            }
            (Stage::Ramp(_), Some((_, best))) if rate >= best * GAIN => {
                self.stage = Stage::Ramp(0);
                self.best = Some((limit, rate));
                if limit >= self.max {
                    self.stage = Stage::Hold(HOLD_TRIALS);
                    return limit;
                }
                (limit * 2).min(self.max)
            }
            // One doubling that gained nothing may have met a noisy moment: one more is tried
            // before settling on the best.
            (Stage::Ramp(0), Some(_)) if limit < self.max => {
                self.stage = Stage::Ramp(1);
                (limit * 2).min(self.max)
            }
            (Stage::Ramp(_), Some((at, _))) => {
                self.stage = Stage::Hold(HOLD_TRIALS);
                at
            }
            (Stage::Hold(left), Some((at, best))) => {
                // Conditions drift (other tenants, a different mix of sizes): the best limit's
                // rate is re-learnt while holding, so probes are judged against the present.
                self.best = Some((at, 0.5 * best + 0.5 * rate));
                if left > 1 {
                    self.stage = Stage::Hold(left - 1);
                    return at;
                }
                if at < self.max {
                    self.stage = Stage::ProbeUp;
                    up(at)
                } else {
                    self.stage = Stage::ProbeDown;
                    down(at)
                }
            }
            (Stage::ProbeUp, Some((at, best))) => {
                if rate >= best * PROBE_GAIN {
                    self.best = Some((limit, rate));
                    if limit < self.max {
                        return up(limit);
                    }
                    self.stage = Stage::Hold(HOLD_TRIALS);
                    return limit;
                }
                if at > self.min {
                    self.stage = Stage::ProbeDown;
                    return down(at);
                }
                self.stage = Stage::Hold(HOLD_TRIALS);
                at
            }
            (Stage::ProbeDown, Some((at, best))) => {
                self.stage = Stage::Hold(HOLD_TRIALS);
                if rate >= best * PROBE_KEEP {
                    self.best = Some((limit, rate));
                    return limit;
                }
                at
            }
        }
    }
}

struct State {
    limit: usize,
    inflight: usize,
    /// Slots taken since the start.
    taken: u64,
    waiting: usize,
    /// Slots to withhold as they come back, after the limit was lowered below what was in
    /// flight.
    debt: usize,
    peak: usize,
    ctl: Option<Controller>,
}

impl State {
    fn take(&mut self) {
        self.inflight += 1;
        self.taken += 1;
        if self.taken == 1 {
            // Trials time the transfer, not what came before it (listing, connecting).
            if let Some(c) = self.ctl.as_mut() {
                c.trial_start = Instant::now();
            }
        }
    }
}

/// The in-flight limit: `acquire` (tasks) or `acquire_blocking` (threads) a slot, and the slot
/// is given back, and counted, when the `Permit` is dropped.
///
/// Slots are handed out first come, first served (a semaphore's queue): a file's blocks ask
/// in order and are granted in order, so a later block can never hold the slot an earlier one
/// of the same file waits for while the file waits for that earlier block.
pub struct Depth {
    state: Mutex<State>,
    slots: tokio::sync::Semaphore,
    initial: usize,
    started: Instant,
    /// Where the retry loop counts throttling answers (429, 503, timeouts).
    stats: Option<Arc<Stats>>,
}

impl Depth {
    pub fn fixed(limit: usize) -> Depth {
        Depth::new(limit.max(1), None)
    }

    /// Starts at `initial` and moves within `min..=max`.
    pub fn adaptive(initial: usize, min: usize, max: usize) -> Depth {
        let (min, max) = (min.max(1), max.max(min.max(1)));
        let initial = initial.clamp(min, max);
        let ctl = Controller {
            min,
            max,
            stage: Stage::Ramp(0),
            best: None,
            trial_start: Instant::now(),
            trial_ops: 0,
            trial_bytes: 0,
            trial_saturated: 0,
            settling: 0,
            throttles_seen: 0,
            warm: false,
            trace: Vec::new(),
        };
        Depth::new(initial, Some(ctl))
    }

    fn new(limit: usize, ctl: Option<Controller>) -> Depth {
        Depth {
            state: Mutex::new(State {
                limit,
                inflight: 0,
                taken: 0,
                waiting: 0,
                debt: 0,
                peak: limit,
                ctl,
            }),
            slots: tokio::sync::Semaphore::new(limit),
            initial: limit,
            started: Instant::now(),
            stats: None,
        }
    }

    /// Takes throttling answers counted in `stats` as the signal to back off.
    pub fn watching(mut self, stats: Arc<Stats>) -> Depth {
        self.stats = Some(stats);
        self
    }

    fn throttles(&self) -> u64 {
        self.stats.as_ref().map_or(0, |s| s.throttled.load(Relaxed))
    }

    pub fn limit(&self) -> usize {
        self.state.lock().unwrap().limit
    }

    /// The most this run will ever keep in flight: what pools and thread counts are sized for.
    pub fn ceiling(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.ctl.as_ref().map_or(s.limit, |c| c.max)
    }

    pub async fn acquire(&self) -> Permit<'_> {
        self.state.lock().unwrap().waiting += 1;
        // Counted as waiting until granted, or until the wait is given up (a dropped task).
        let waiting = Waiting(self);
        self.slots
            .acquire()
            .await
            .expect("the depth's semaphore is never closed")
            .forget();
        drop(waiting);
        self.state.lock().unwrap().take();
        Permit {
            depth: self,
            bytes: 0,
        }
    }

    pub fn acquire_blocking(&self) -> Permit<'_> {
        futures::executor::block_on(self.acquire())
    }

    fn release(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap();
        // Whether this slot was in demand: someone waited for it, or all were taken.
        let saturated = s.waiting > 0 || s.inflight >= s.limit;
        s.inflight -= 1;
        let before = s.limit;
        if let Some(c) = s.ctl.as_mut() {
            let now = Instant::now();
            let at = now.duration_since(self.started).as_secs_f64();
            let next = c.finished(before, bytes, saturated, self.throttles(), now, at);
            s.limit = next;
            s.peak = s.peak.max(next);
        }
        // This slot goes back, with any the limit gained; a lowered limit is paid from slots
        // as they come back, and from idle ones at once.
        let mut give = 1 + s.limit.saturating_sub(before);
        s.debt += before.saturating_sub(s.limit);
        let paid = s.debt.min(give);
        s.debt -= paid;
        give -= paid;
        if s.debt > 0 {
            s.debt -= self.slots.forget_permits(s.debt);
        }
        drop(s);
        self.slots.add_permits(give);
    }

    pub fn report(&self) -> Report {
        let s = self.state.lock().unwrap();
        let (mode, min, max, trace) = match &s.ctl {
            Some(c) => (Mode::Adaptive, c.min, c.max, c.trace.clone()),
            None => (Mode::Fixed, s.limit, s.limit, Vec::new()),
        };
        // With a controller, the limit it settled on is the best one it found: the last trial
        // may have been a probe, which is not a choice.
        let last = s
            .ctl
            .as_ref()
            .and_then(|c| c.best.map(|b| b.0))
            .unwrap_or(s.limit);
        Report {
            mode,
            initial: self.initial,
            last,
            peak: s.peak,
            min,
            max,
            throttled: self.throttles(),
            trace,
        }
    }
}

struct Waiting<'a>(&'a Depth);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().waiting -= 1;
    }
}

/// A slot in flight. Say how many bytes it moved with `done` (else it counts as a request of
/// no bytes) before it is dropped.
pub struct Permit<'a> {
    depth: &'a Depth,
    bytes: u64,
}

impl Permit<'_> {
    pub fn done(&mut self, bytes: u64) {
        self.bytes += bytes;
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.depth.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn ctl(min: usize, max: usize) -> Controller {
        let d = Depth::adaptive(min, min, max);
        d.state.into_inner().unwrap().ctl.unwrap()
    }

    /// A model where the rate grows with the limit up to a knee and falls a little past it.
    fn model(knee: usize) -> impl Fn(usize) -> f64 {
        move |l| {
            if l <= knee {
                l as f64 * 100.0
            } else {
                knee as f64 * 100.0 * (1.0 - 0.002 * (l - knee) as f64)
            }
        }
    }

    /// Runs the controller against `rate` from `start`; the limits it went through.
    fn walk(
        rate: impl Fn(usize) -> f64,
        start: usize,
        max: usize,
        trials: usize,
    ) -> (Controller, Vec<usize>) {
        let mut c = ctl(1, max);
        let mut limit = start;
        let mut seen = vec![limit];
        for _ in 0..trials {
            limit = c.decide(limit, rate(limit), false);
            seen.push(limit);
        }
        (c, seen)
    }

    #[test]
    fn finds_the_knee_and_stays_near_its_rate() {
        for knee in [3, 8, 24, 50, 100, 300] {
            let rate = model(knee);
            let peak = rate(knee);
            let (c, seen) = walk(&rate, 8, 256, 60);
            let best = c.best.unwrap().0;
            if knee >= 8 {
                let knee = knee.min(256) as f64;
                assert!(
                    best as f64 >= knee * 0.8 && best as f64 <= knee * 1.3,
                    "knee {knee}: settled at {best}, path {seen:?}"
                );
            }
            // Whatever the start, the rate it settles on is close to the best there is, and
            // probing around it costs little.
            assert!(
                rate(best) >= 0.95 * peak.min(rate(256)),
                "knee {knee}: settled at {best}, path {seen:?}"
            );
            let mean = seen[12..].iter().map(|&l| rate(l)).sum::<f64>() / (seen.len() - 12) as f64;
            assert!(mean >= 0.9 * rate(best), "knee {knee}: {seen:?}");
        }
    }

    #[test]
    fn a_flat_rate_keeps_the_smaller_limit() {
        // A server that is the limit whatever the depth (a single-threaded emulator): more in
        // flight buys nothing, so the controller must not climb.
        let mut c = ctl(1, 256);
        let mut limit = 8;
        for _ in 0..40 {
            limit = c.decide(limit, 1000.0, false);
        }
        assert!(c.best.unwrap().0 <= 8, "settled at {:?}", c.best);
    }

    #[test]
    fn noise_does_not_walk_the_limit_below_the_knee() {
        // A busy emulator: each trial's rate off by up to a third either way. Noise makes a
        // smaller limit look as good now and then; a controller that believes it too readily
        // (one keeping a probe that kept 80 % of the rate does) walks below the knee and loses
        // more than a tenth of the rate on average.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            1.0 + ((seed % 2001) as f64 / 1000.0 - 1.0) / 3.0
        };
        // Time per item: the server's share, the same at any depth, plus the round trip
        // shared by what is in flight (at 0 ms against Azurite measured close to 2.1 + 1.3 ÷
        // depth; at 20 ms, the round trip weighs more).
        for rtt in [0.6, 5.0, 30.0] {
            let rate = |l: usize| 1000.0 / (1.0 + rtt / l as f64);
            let mut got = 0.0;
            let runs = 20;
            for _ in 0..runs {
                let mut c = ctl(2, 256);
                let mut limit = 8;
                for i in 0..200 {
                    if i >= 50 {
                        got += rate(limit) / rate(256) / 150.0 / runs as f64;
                    }
                    limit = c.decide(limit, rate(limit) * noise(), false);
                }
            }
            assert!(
                got >= 0.9,
                "round trip {rtt}: {got:.2} of the best rate on average"
            );
        }
    }

    #[test]
    fn a_trial_starts_once_the_previous_limits_requests_are_done() {
        let mut c = ctl(1, 256);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let (mut limit, mut n) = (8, 0);
        // The first trial warms up, the second is judged and doubles the limit.
        while limit == 8 {
            n += 1;
            limit = c.finished(limit, 0, true, 0, ms(n), 0.0);
            assert!(n < 1000, "never judged");
        }
        assert_eq!(limit, 16);
        for i in 1..=8 {
            assert_eq!(c.finished(limit, 0, true, 0, ms(n + i), 0.0), 16);
            assert_eq!(c.trial_ops, 0, "completion {i} of the old limit counted");
        }
        assert_eq!(
            c.trial_start,
            ms(n + 8),
            "the trial's clock starts at the last of them"
        );
        assert_eq!(c.finished(limit, 0, true, 0, ms(n + 9), 0.0), 16);
        assert_eq!(c.trial_ops, 1);
    }

    #[test]
    fn throttling_halves_at_once() {
        let mut c = ctl(2, 256);
        assert_eq!(c.decide(64, 1e9, true), 32);
        assert_eq!(c.decide(3, 1e9, true), 2, "never below the minimum");
    }

    #[test]
    fn the_gate_bounds_what_is_in_flight_and_counts_what_finishes() {
        let d = std::sync::Arc::new(Depth::fixed(3));
        let busy = std::sync::Arc::new(AtomicU64::new(0));
        let most = std::sync::Arc::new(AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (d, busy, most) = (d.clone(), busy.clone(), most.clone());
                s.spawn(move || {
                    for _ in 0..20 {
                        let mut p = d.acquire_blocking();
                        let now = busy.fetch_add(1, Relaxed) + 1;
                        most.fetch_max(now, Relaxed);
                        std::thread::sleep(Duration::from_micros(200));
                        busy.fetch_sub(1, Relaxed);
                        p.done(10);
                    }
                });
            }
        });
        assert_eq!(most.load(Relaxed), 3);
        let r = d.report();
        assert_eq!((r.mode, r.initial, r.last, r.peak), (Mode::Fixed, 3, 3, 3));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adaptive_climbs_when_latency_is_the_limit() {
        // Each request just waits 2 ms: throughput is depth ÷ latency, so the limit should
        // climb from 4 to the top of its range.
        let d = std::sync::Arc::new(Depth::adaptive(4, 1, 64));
        let tasks: Vec<_> = (0..128)
            .map(|_| {
                let d = d.clone();
                tokio::spawn(async move {
                    for _ in 0..40 {
                        let mut p = d.acquire().await;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        p.done(1000);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let r = d.report();
        assert_eq!(r.mode, Mode::Adaptive);
        assert!(r.peak >= 32, "{r:?}");
        assert!(r.last >= 16, "{r:?}");
    }
}
