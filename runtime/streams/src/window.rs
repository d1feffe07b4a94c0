//! Time windows (Kafka's `TimeWindows`, `Window`, `Windowed<K>`) and how
//! windowed keys become bytes, in stores and in topics.
//!
//! - [`TimeWindows`]: tumbling (advance = size) or hopping (advance < size)
//!   windows `[start, end)` aligned to the epoch, with a grace period. A
//!   record at `ts` falls into every window with `start <= ts < end`
//!   (Kafka's `TimeWindows.windowsFor`), starts never negative.
//! - A window is *closed* once stream time reaches `end + grace`; a record
//!   for a closed window is late: dropped and counted (`dropped-records`),
//!   as Kafka's `KStreamWindowAggregate` does.
//! - Window stores keep Kafka's `WindowKeySchema` layout: `key bytes ||
//!   window start (8 bytes BE) || sequence number (4 bytes BE)`, so the
//!   changelog topic carries the same keys a Kafka Streams window store's
//!   does. Retention (window size + grace unless `Materialized::
//!   with_retention` says more; less is refused at build time) is enforced
//!   per segment interval (`max(retention / 2, 60 s)`, Kafka's default):
//!   each time stream time enters a new segment, windows that ended before
//!   `stream time - retention` are deleted from the store (and tombstoned
//!   in its compacted changelog) — Kafka drops whole segment stores; Rill
//!   keeps one store per window store and deletes the expired keys.
//! - In topics a windowed key is `key bytes || window start (8 bytes BE)`
//!   (Kafka's `TimeWindowedSerializer`); the end is start + the window size
//!   the reader knows ([`Serdes::time_windowed`](crate::Serdes::time_windowed)).

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

pub(crate) use rill_state::session::{parse_session_key, session_key, SESSION_KEY_SUFFIX};
#[cfg(test)]
use rill_state::window::segment_interval_ms;
pub(crate) use rill_state::window::{
    store_key, store_key_key, store_key_start, SegmentSweep, WINDOW_KEY_SUFFIX,
};

use crate::error::StreamsError;
use crate::serdes::{Serde, Serdes, SharedSerde};

/// A time window `[start, end)` in milliseconds (Kafka's `TimeWindow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// Start in ms since the Unix epoch, inclusive.
    pub start: i64,
    /// End in ms since the Unix epoch: exclusive for time windows, inclusive for session and
    /// sliding windows.
    pub end: i64,
}

impl Window {
    /// The window from `start` to `end` (ms).
    pub fn new(start: i64, end: i64) -> Self {
        Self { start, end }
    }
}

/// A key and the window it was aggregated in (Kafka's `Windowed<K>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Windowed<K> {
    /// The grouping key.
    pub key: K,
    /// The window the aggregate covers.
    pub window: Window,
}

impl<K> Windowed<K> {
    /// `key` in `window`.
    pub fn new(key: K, window: Window) -> Self {
        Self { key, window }
    }
}

impl<K: std::fmt::Display> std::fmt::Display for Windowed<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}@{}/{}]",
            self.key, self.window.start, self.window.end
        )
    }
}

/// Fixed-size windows, tumbling or hopping (Kafka's `TimeWindows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size_ms: i64,
    advance_ms: i64,
    grace_ms: i64,
    /// Why these windows are unusable; reported when the topology is built.
    invalid: Option<&'static str>,
}

fn millis(d: Duration) -> Option<i64> {
    i64::try_from(d.as_millis()).ok()
}

impl TimeWindows {
    /// Tumbling windows of `size`; records are late as soon as their window
    /// ends (Kafka's `ofSizeWithNoGrace`).
    pub fn of_size_with_no_grace(size: Duration) -> Self {
        Self::of_size_and_grace(size, Duration::ZERO)
    }

    /// Tumbling windows of `size` that accept out-of-order records until
    /// `grace` after their end (Kafka's `ofSizeAndGrace`).
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> Self {
        let (size_ms, grace_ms) = (millis(size), millis(grace));
        let invalid = match (size_ms, grace_ms) {
            (Some(0), _) => Some("window size must be larger than zero"),
            (None, _) => Some("window size does not fit in i64 milliseconds"),
            (_, None) => Some("grace period does not fit in i64 milliseconds"),
            (Some(s), Some(g)) if s.checked_add(g).is_none() => {
                Some("window size plus grace period overflows i64 milliseconds")
            }
            _ => None,
        };
        Self {
            size_ms: size_ms.unwrap_or(1),
            advance_ms: size_ms.unwrap_or(1).max(1),
            grace_ms: grace_ms.unwrap_or(0),
            invalid,
        }
    }

    /// Hopping windows: a new window every `advance` (Kafka's `advanceBy`);
    /// `advance` must be positive and at most the size.
    pub fn advance_by(mut self, advance: Duration) -> Self {
        match millis(advance) {
            Some(a) if a > 0 && a <= self.size_ms => self.advance_ms = a,
            _ => {
                self.invalid = self.invalid.or(Some(
                    "window advance interval must be larger than zero and no larger than the window size",
                ))
            }
        }
        self
    }

    /// Length of each window in ms.
    pub fn size_ms(&self) -> i64 {
        self.size_ms
    }
    /// Time between the starts of consecutive windows in ms (equal to the size for tumbling
    /// windows).
    pub fn advance_ms(&self) -> i64 {
        self.advance_ms
    }
    /// How long after a window's end out-of-order records are still accepted, in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// The windows a record at `ts` belongs to, oldest first.
    pub fn windows_for(&self, ts: i64) -> Vec<Window> {
        let first = (ts - self.size_ms + self.advance_ms).max(0);
        let mut start = first - first % self.advance_ms;
        let mut out = Vec::with_capacity((self.size_ms / self.advance_ms) as usize);
        while start <= ts {
            out.push(Window::new(start, start.saturating_add(self.size_ms)));
            start += self.advance_ms;
        }
        out
    }

    /// Checks the windows and the store's retention (`None`: size + grace).
    pub(crate) fn validate(
        &self,
        store: &str,
        retention: Option<Duration>,
    ) -> Result<WindowSpec, StreamsError> {
        let retention_ms = check_retention(
            &format!("windows of state store {store}"),
            self.invalid,
            ("window size", self.size_ms),
            self.grace_ms,
            retention,
        )?;
        Ok(WindowSpec {
            windows: *self,
            retention_ms,
        })
    }
}

/// Validated windows and their store's retention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowSpec {
    pub windows: TimeWindows,
    pub retention_ms: i64,
}

#[cfg(test)]
impl WindowSpec {
    /// Kafka's default segment interval: half the retention, at least a minute.
    pub fn segment_interval_ms(&self) -> i64 {
        segment_interval_ms(self.retention_ms)
    }
}

/// The checks every kind of window shares: a construction error, then the
/// store's retention, at least `span + grace` (and exactly that when not
/// given, Kafka's default). `what` names the windows and their store.
fn check_retention(
    what: &str,
    invalid: Option<&'static str>,
    (span_name, span_ms): (&str, i64),
    grace_ms: i64,
    retention: Option<Duration>,
) -> Result<i64, StreamsError> {
    let bad = |why: &str| StreamsError::Topology(format!("{what}: {why}"));
    if let Some(why) = invalid {
        return Err(bad(why));
    }
    let min = span_ms + grace_ms;
    let Some(r) = retention else {
        return Ok(min);
    };
    let r = millis(r).ok_or_else(|| bad("retention does not fit in i64 milliseconds"))?;
    if r < min {
        return Err(bad(&format!(
            "the retention period ({r} ms) must be no smaller than the {span_name} ({span_ms} ms) plus the grace period ({grace_ms} ms)"
        )));
    }
    Ok(r)
}

/// `Windowed<K>` as a window store key (sequence number 0: aggregations
/// keep one value per key and window).
pub(crate) struct WindowStoreKeySerde<K> {
    pub inner: SharedSerde<K>,
    pub size_ms: i64,
}

impl<K: Send + Sync + 'static> Serde<Windowed<K>> for WindowStoreKeySerde<K> {
    fn serialize(&self, topic: &str, data: &Windowed<K>) -> Result<Option<Bytes>, String> {
        let k = self.inner.serialize(topic, &data.key)?.unwrap_or_default();
        Ok(Some(store_key(&k, data.window.start, 0)))
    }
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<Windowed<K>, String> {
        let d = data.ok_or("a window store key is never null")?;
        let (Some(k), Some(start)) = (store_key_key(d), store_key_start(d)) else {
            return Err(format!(
                "a window store key needs at least {WINDOW_KEY_SUFFIX} bytes, got {}",
                d.len()
            ));
        };
        let key = self.inner.deserialize(topic, Some(k))?;
        Ok(Windowed::new(
            key,
            Window::new(start, start.saturating_add(self.size_ms)),
        ))
    }
}

/// `Windowed<K>` in topics: Kafka's `TimeWindowedSerializer` /
/// `TimeWindowedDeserializer` (`key || start`, end = start + size).
pub(crate) struct TimeWindowedSerde<K> {
    pub inner: SharedSerde<K>,
    pub size_ms: i64,
}

impl<K: Send + Sync + 'static> Serde<Windowed<K>> for TimeWindowedSerde<K> {
    fn serialize(&self, topic: &str, data: &Windowed<K>) -> Result<Option<Bytes>, String> {
        let k = self.inner.serialize(topic, &data.key)?.unwrap_or_default();
        let mut b = BytesMut::with_capacity(k.len() + 8);
        b.put_slice(&k);
        b.put_i64(data.window.start);
        Ok(Some(b.freeze()))
    }
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<Windowed<K>, String> {
        let d = data.ok_or("a windowed key is never null")?;
        let at = d.len().checked_sub(8).ok_or_else(|| {
            format!(
                "a time-windowed key needs at least 8 bytes, got {}",
                d.len()
            )
        })?;
        let start = i64::from_be_bytes(d[at..].try_into().map_err(|_| "short key")?);
        let key = self.inner.deserialize(topic, Some(&d[..at]))?;
        Ok(Windowed::new(
            key,
            Window::new(start, start.saturating_add(self.size_ms)),
        ))
    }
}

/// Sessions: windows that grow while records keep arriving within the
/// inactivity gap (Kafka's `SessionWindows`). A record at `ts` starts the
/// session `[ts, ts]` or extends every session of its key that ends at or
/// after `ts - gap` and starts at or before `ts + gap`, merging them; both
/// ends of a session are inclusive, as Kafka's `SessionWindow`. A session
/// is closed once stream time passes its end + grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap_ms: i64,
    grace_ms: i64,
    invalid: Option<&'static str>,
}

impl SessionWindows {
    /// Kafka's `ofInactivityGapWithNoGrace`.
    pub fn of_inactivity_gap_with_no_grace(gap: Duration) -> Self {
        Self::of_inactivity_gap_and_grace(gap, Duration::ZERO)
    }

    /// Kafka's `ofInactivityGapAndGrace`.
    pub fn of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> Self {
        let (gap_ms, grace_ms) = (millis(gap), millis(grace));
        let invalid = match (gap_ms, grace_ms) {
            (Some(0), _) => Some("session inactivity gap must be larger than zero"),
            (None, _) => Some("session inactivity gap does not fit in i64 milliseconds"),
            (_, None) => Some("grace period does not fit in i64 milliseconds"),
            (Some(g), Some(gr)) if g.checked_add(gr).is_none() => {
                Some("inactivity gap plus grace period overflows i64 milliseconds")
            }
            _ => None,
        };
        Self {
            gap_ms: gap_ms.unwrap_or(1),
            grace_ms: grace_ms.unwrap_or(0),
            invalid,
        }
    }

    /// Longest silence in ms within one session; a record later than that starts a new session.
    pub fn inactivity_gap_ms(&self) -> i64 {
        self.gap_ms
    }
    /// How long after a session's end out-of-order records may still join it, in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// Checks the windows and the store's retention (`None`: gap + grace,
    /// Kafka's default).
    pub(crate) fn validate(
        &self,
        store: &str,
        retention: Option<Duration>,
    ) -> Result<i64, StreamsError> {
        check_retention(
            &format!("session windows of state store {store}"),
            self.invalid,
            ("inactivity gap", self.gap_ms),
            self.grace_ms,
            retention,
        )
    }
}

/// Windows of a fixed time difference defined by the records themselves
/// (Kafka's `SlidingWindows`, KIP-450): every record at `t` has its left
/// window `[t - d, t]`, and a right window `[t + 1, t + 1 + d]` exists once
/// a record falls into it; both ends are inclusive, and a window holds the
/// records whose timestamps it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    diff_ms: i64,
    grace_ms: i64,
    invalid: Option<&'static str>,
}

impl SlidingWindows {
    /// Kafka's `ofTimeDifferenceWithNoGrace`.
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Kafka's `ofTimeDifferenceAndGrace`.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        let (d, g) = (millis(difference), millis(grace));
        let invalid = match (d, g) {
            (Some(0), _) => Some("sliding window time difference must be larger than zero"),
            (None, _) => Some("time difference does not fit in i64 milliseconds"),
            (_, None) => Some("grace period does not fit in i64 milliseconds"),
            (Some(d), Some(g)) if d.checked_add(g).and_then(|x| x.checked_add(1)).is_none() => {
                Some("time difference plus grace period overflows i64 milliseconds")
            }
            _ => None,
        };
        Self {
            diff_ms: d.unwrap_or(1),
            grace_ms: g.unwrap_or(0),
            invalid,
        }
    }

    /// Largest time difference in ms between records in one window.
    pub fn time_difference_ms(&self) -> i64 {
        self.diff_ms
    }
    /// How long after a window's end out-of-order records are still accepted, in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// Checks the windows; the stores' retention (difference + grace unless
    /// more is asked for).
    pub(crate) fn validate(
        &self,
        store: &str,
        retention: Option<Duration>,
    ) -> Result<i64, StreamsError> {
        check_retention(
            &format!("sliding windows of state store {store}"),
            self.invalid,
            ("time difference", self.diff_ms),
            self.grace_ms,
            retention,
        )
    }
}

/// How far apart in time two records of a stream–stream join may be
/// (Kafka's `JoinWindows`): a left record at `t` joins right records in
/// `[t - before, t + after]`; both default to the time difference given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinWindows {
    before_ms: i64,
    after_ms: i64,
    grace_ms: i64,
    invalid: Option<&'static str>,
}

impl JoinWindows {
    /// Kafka's `ofTimeDifferenceWithNoGrace`.
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Kafka's `ofTimeDifferenceAndGrace`.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        let (d, g) = (millis(difference), millis(grace));
        let invalid = match (d, g) {
            (None, _) => Some("join time difference does not fit in i64 milliseconds"),
            (_, None) => Some("grace period does not fit in i64 milliseconds"),
            (Some(d), Some(g)) if d.checked_mul(2).and_then(|x| x.checked_add(g)).is_none() => {
                Some("join window plus grace period overflows i64 milliseconds")
            }
            _ => None,
        };
        Self {
            before_ms: d.unwrap_or(0),
            after_ms: d.unwrap_or(0),
            grace_ms: g.unwrap_or(0),
            invalid,
        }
    }

    /// Only right records at most `before` older than the left one join
    /// (Kafka's `before`).
    pub fn before(mut self, before: Duration) -> Self {
        match millis(before) {
            Some(b) => self.before_ms = b,
            None => {
                self.invalid = self
                    .invalid
                    .or(Some("before does not fit in i64 milliseconds"))
            }
        }
        self
    }

    /// Only right records at most `after` newer than the left one join
    /// (Kafka's `after`).
    pub fn after(mut self, after: Duration) -> Self {
        match millis(after) {
            Some(a) => self.after_ms = a,
            None => {
                self.invalid = self
                    .invalid
                    .or(Some("after does not fit in i64 milliseconds"))
            }
        }
        self
    }

    /// How much older (ms) than a left record a right record may be and still join.
    pub fn before_ms(&self) -> i64 {
        self.before_ms
    }
    /// How much newer (ms) than a left record a right record may be and still join.
    pub fn after_ms(&self) -> i64 {
        self.after_ms
    }
    /// How long after the join window out-of-order records are still accepted, in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// Checks the windows; the join stores' retention (before + after + grace).
    pub(crate) fn validate(&self, join: &str) -> Result<i64, StreamsError> {
        if let Some(why) = self.invalid {
            return Err(StreamsError::Topology(format!(
                "join windows of {join}: {why}"
            )));
        }
        Ok(self.before_ms + self.after_ms + self.grace_ms)
    }
}

/// `Windowed<K>` for sessions, in stores and topics (Kafka's
/// `SessionWindowedSerde`).
pub(crate) struct SessionWindowedSerde<K> {
    pub inner: SharedSerde<K>,
}

impl<K: Send + Sync + 'static> Serde<Windowed<K>> for SessionWindowedSerde<K> {
    fn serialize(&self, topic: &str, data: &Windowed<K>) -> Result<Option<Bytes>, String> {
        let k = self.inner.serialize(topic, &data.key)?.unwrap_or_default();
        Ok(Some(session_key(&k, data.window.start, data.window.end)))
    }
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<Windowed<K>, String> {
        let d = data.ok_or("a session-windowed key is never null")?;
        let (k, start, end) = parse_session_key(d).ok_or_else(|| {
            format!(
                "a session-windowed key needs at least {SESSION_KEY_SUFFIX} bytes, got {}",
                d.len()
            )
        })?;
        Ok(Windowed::new(
            self.inner.deserialize(topic, Some(k))?,
            Window::new(start, end),
        ))
    }
}

/// The time-windowed key serde (see [`Serdes::time_windowed`]).
pub(crate) fn time_windowed<K: Send + Sync + 'static>(
    inner: SharedSerde<K>,
    size: Duration,
) -> SharedSerde<Windowed<K>> {
    Arc::new(TimeWindowedSerde {
        inner,
        size_ms: millis(size).unwrap_or(i64::MAX),
    })
}

impl Serdes {
    /// Windowed keys as Kafka's `WindowedSerdes.timeWindowedSerdeFrom`
    /// writes them: the inner key's bytes, then the window start (8 bytes
    /// big-endian); the end read back is start + `window_size`.
    pub fn time_windowed<K: Send + Sync + 'static>(
        inner: SharedSerde<K>,
        window_size: std::time::Duration,
    ) -> SharedSerde<Windowed<K>> {
        time_windowed(inner, window_size)
    }
    /// Session-windowed keys as Kafka's `SessionWindowedSerde` writes them:
    /// the inner key's bytes, the session end, then its start (8 bytes
    /// big-endian each).
    pub fn session_windowed<K: Send + Sync + 'static>(
        inner: SharedSerde<K>,
    ) -> SharedSerde<Windowed<K>> {
        Arc::new(SessionWindowedSerde { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Serdes;

    fn starts(w: &TimeWindows, ts: i64) -> Vec<(i64, i64)> {
        w.windows_for(ts).iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_and_hopping_windows_match_kafkas_windows_for() {
        let tumbling = TimeWindows::of_size_with_no_grace(Duration::from_millis(10));
        assert_eq!(starts(&tumbling, 0), vec![(0, 10)]);
        assert_eq!(starts(&tumbling, 9), vec![(0, 10)]);
        assert_eq!(starts(&tumbling, 10), vec![(10, 20)]);
        let hopping = TimeWindows::of_size_with_no_grace(Duration::from_millis(10))
            .advance_by(Duration::from_millis(5));
        // Every window with start <= ts < start + size, none starting below 0.
        assert_eq!(starts(&hopping, 3), vec![(0, 10)]);
        assert_eq!(starts(&hopping, 7), vec![(0, 10), (5, 15)]);
        assert_eq!(starts(&hopping, 10), vec![(5, 15), (10, 20)]);
        assert_eq!(starts(&hopping, 14), vec![(5, 15), (10, 20)]);
    }

    #[test]
    fn bad_windows_and_short_retention_are_refused_with_the_store_named() {
        let z = TimeWindows::of_size_with_no_grace(Duration::ZERO);
        let e = z.validate("counts", None).unwrap_err().to_string();
        assert!(
            e.contains("counts") && e.contains("larger than zero"),
            "{e}"
        );
        let hop = TimeWindows::of_size_with_no_grace(Duration::from_millis(10))
            .advance_by(Duration::from_millis(11));
        let e = hop.validate("counts", None).unwrap_err().to_string();
        assert!(e.contains("advance interval"), "{e}");
        let w = TimeWindows::of_size_and_grace(Duration::from_secs(60), Duration::from_secs(10));
        let e = w
            .validate("counts", Some(Duration::from_secs(69)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("retention period (69000 ms)")
                && e.contains("window size (60000 ms)")
                && e.contains("grace period (10000 ms)"),
            "{e}"
        );
        let spec = w.validate("counts", None).unwrap();
        assert_eq!(spec.retention_ms, 70_000);
        assert_eq!(spec.segment_interval_ms(), 60_000);
    }

    #[test]
    fn session_keys_are_key_end_start_and_bad_gaps_are_refused() {
        let serde = SessionWindowedSerde {
            inner: Serdes::string(),
        };
        let wk = Windowed::new("k".to_string(), Window::new(1, 2));
        let b = serde.serialize("t", &wk).unwrap().unwrap();
        assert_eq!(&b[..], b"k\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x01");
        assert_eq!(serde.deserialize("t", Some(&b)).unwrap(), wk);
        let e = SessionWindows::of_inactivity_gap_with_no_grace(Duration::ZERO)
            .validate("sessions", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sessions") && e.contains("larger than zero"),
            "{e}"
        );
        let w = SessionWindows::of_inactivity_gap_and_grace(
            Duration::from_millis(10),
            Duration::from_millis(5),
        );
        assert_eq!(w.validate("s", None).unwrap(), 15);
        assert!(w
            .validate("s", Some(Duration::from_millis(14)))
            .unwrap_err()
            .to_string()
            .contains("retention period (14 ms)"));
    }

    #[test]
    fn windowed_keys_use_kafkas_byte_layouts() {
        let wk = Windowed::new("ab".to_string(), Window::new(256, 266));
        let store = WindowStoreKeySerde {
            inner: Serdes::string(),
            size_ms: 10,
        };
        let b = store.serialize("s", &wk).unwrap().unwrap();
        assert_eq!(&b[..], b"ab\0\0\0\0\0\0\x01\0\0\0\0\0");
        assert_eq!(store.deserialize("s", Some(&b)).unwrap(), wk);
        assert_eq!(store_key_start(&b), Some(256));
        let topic = time_windowed(Serdes::string(), Duration::from_millis(10));
        let b = topic.serialize("t", &wk).unwrap().unwrap();
        assert_eq!(&b[..], b"ab\0\0\0\0\0\0\x01\0");
        assert_eq!(topic.deserialize("t", Some(&b)).unwrap(), wk);
        let e = topic.deserialize("t", Some(b"abc")).unwrap_err();
        assert!(e.contains("at least 8 bytes"), "{e}");
    }
}
