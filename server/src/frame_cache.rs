//! The fleet-wide, content-addressed frame cache.
//!
//! One cache for the whole server: key = (XXH3-128 frame hash, encoding), value = the
//! bytes. The raw RGB frame is stored under `RAW_RGB`; every encoding made of it under
//! its own key, made at most once: concurrent requests for the same (hash, encoding)
//! wait for the one encode instead of repeating it (quick_cache placeholders). Bounded
//! by bytes; eviction is quick_cache's CLOCK-Pro (an LRU refinement that resists scans).
//!
//! Forked replicas of a deterministic task produce identical frames, so N replicas
//! cost one encode and, with `not_modified`, one transfer.
//!
//! Keys are scoped: a principal's frames are deduplicated against its own (or its
//! sharing group's, `share=` in the token file) and nobody else's, so whether a frame
//! is a hit, and how long it takes, never tells a principal what another one's
//! screens showed. Within a group the operator accepts that; there a frame another
//! member showed still counts as a miss in the caller's own figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use deskgym_proto::v1 as pb;
use deskgym_worker::Frame;
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};

use crate::encode::EncodeError;
use crate::encode::encode;

/// Cache key: the scope (a principal, or its sharing group), frame hash and encoding.
pub(crate) type Key = (Arc<str>, u128, pb::ImageEncoding);

/// Cached bytes of one frame in one encoding.
#[derive(Clone, Debug)]
pub(crate) struct Blob {
    /// Frame width.
    pub width: u32,
    /// Frame height.
    pub height: u32,
    /// The bytes (shared, never copied on the way to the wire).
    pub bytes: Bytes,
    /// The principals whose envs showed this frame (shared by all of a frame's
    /// encodings): GetFrames answers only them, so a hash is no way into another
    /// tenant's screen, nor a way to learn what it shows.
    pub owners: Owners,
}

/// Principals that showed a frame (a few at most: replicas share their owner).
pub(crate) type Owners = Arc<std::sync::Mutex<Vec<Arc<str>>>>;

/// Most principals remembered per frame; beyond, the oldest is forgotten (GetFrames
/// then answers it NOT_FOUND, as for an evicted frame).
const MAX_OWNERS: usize = 16;

impl Blob {
    /// A frame shown by `owner`'s env.
    pub(crate) fn new(width: u32, height: u32, bytes: Bytes, owner: &Arc<str>) -> Self {
        Self {
            width,
            height,
            bytes,
            owners: Arc::new(std::sync::Mutex::new(vec![owner.clone()])),
        }
    }

    fn lock_owners(&self) -> std::sync::MutexGuard<'_, Vec<Arc<str>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `who`'s envs showed this frame.
    fn owned_by(&self, who: &str) -> bool {
        self.lock_owners().iter().any(|o| &**o == who)
    }

    fn add_owner(&self, who: &Arc<str>) {
        let mut owners = self.lock_owners();
        if !owners.iter().any(|o| o == who) {
            if owners.len() >= MAX_OWNERS {
                owners.remove(0);
            }
            owners.push(who.clone());
        }
    }
}

/// Per-entry bookkeeping overhead, so tiny entries still cost something.
const ENTRY_OVERHEAD: u64 = 128;

#[derive(Clone, Debug)]
struct ByBytes;

impl Weighter<Key, Blob> for ByBytes {
    fn weight(&self, _key: &Key, val: &Blob) -> u64 {
        val.bytes.len() as u64 + ENTRY_OVERHEAD
    }
}

#[derive(Clone, Debug, Default)]
struct CountEvictions(Arc<AtomicU64>);

impl Lifecycle<Key, Blob> for CountEvictions {
    type RequestState = ();

    fn begin_request(&self) -> Self::RequestState {}

    fn on_evict(&self, _state: &mut Self::RequestState, _key: Key, _val: Blob) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters, as plain numbers.
#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    encodes: AtomicU64,
    encodes_saved: AtomicU64,
    bytes_saved: AtomicU64,
    not_modified: AtomicU64,
}

/// The fleet frame cache.
pub(crate) struct FrameCache {
    cache: Cache<Key, Blob, ByBytes, DefaultHashBuilder, CountEvictions>,
    evictions: CountEvictions,
    counters: Counters,
    /// Each principal's own counters (GetCacheStats on a server with tokens answers a
    /// principal its own, never the fleet's activity).
    tenants: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<Counters>>>,
    /// Each principal's cache scope when it is a sharing group (absent: its own name).
    scopes: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<str>>>,
    capacity: u64,
}

impl std::fmt::Debug for FrameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl FrameCache {
    /// A cache holding at most `capacity_bytes` of frames.
    pub(crate) fn new(capacity_bytes: u64) -> Self {
        let evictions = CountEvictions::default();
        // ~1 MB per entry is typical (a 640x480 raw frame plus its PNG).
        let estimated = (capacity_bytes / 1_000_000).clamp(16, 1 << 20) as usize;
        let cache = Cache::with(
            estimated,
            capacity_bytes,
            ByBytes,
            DefaultHashBuilder::default(),
            evictions.clone(),
        );
        Self {
            cache,
            evictions,
            counters: Counters::default(),
            tenants: Default::default(),
            scopes: Default::default(),
            capacity: capacity_bytes,
        }
    }

    /// `who`'s own counters.
    fn tenant(&self, who: &Arc<str>) -> Arc<Counters> {
        let mut t = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = t.get(who) {
            return c.clone();
        }
        t.entry(who.clone()).or_default().clone()
    }

    /// Adds to the fleet's counters and to `who`'s.
    fn count(&self, who: &Arc<str>, f: impl Fn(&Counters)) {
        f(&self.counters);
        f(&self.tenant(who));
    }

    /// Puts `who` in cache scope `scope` (its sharing group, or its own name).
    pub(crate) fn scope(&self, who: &Arc<str>, scope: &Arc<str>) {
        let mut s = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        if who == scope {
            s.remove(who);
        } else {
            s.insert(who.clone(), scope.clone());
        }
    }

    fn scope_of(&self, who: &Arc<str>) -> Arc<str> {
        let s = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        s.get(who).cloned().unwrap_or_else(|| who.clone())
    }

    /// The cached blob of `key`, made by `make` if absent; and whether it was made.
    fn lookup(
        &self,
        key: &Key,
        make: impl FnOnce() -> Result<Blob, EncodeError>,
    ) -> Result<(Blob, bool), EncodeError> {
        let mut made = false;
        let blob = self.cache.get_or_insert_with(key, || {
            made = true;
            make()
        })?;
        Ok((blob, made))
    }

    /// Counts a lookup: a hit for the fleet when nothing was made, and for `who` only
    /// if its own envs had shown the frame (`own`): a frame of another member of its
    /// sharing group is a miss in its figures.
    fn count_lookup(&self, who: &Arc<str>, made: bool, own: bool, encoding: pb::ImageEncoding) {
        let encoded = encoding != pb::ImageEncoding::RawRgb;
        let tally = |c: &Counters, hit: bool| {
            if hit {
                c.hits.fetch_add(1, Ordering::Relaxed);
                if encoded {
                    c.encodes_saved.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                c.misses.fetch_add(1, Ordering::Relaxed);
                if encoded && made {
                    c.encodes.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        tally(&self.counters, !made);
        tally(&self.tenant(who), !made && own);
    }

    /// Stores a captured frame (unless the same pixels are cached in its owner's
    /// scope) and returns it in `encoding`, encoding it only if no one in the scope has
    /// yet. The pixels are shared `Bytes`, so a recorder can hold the same buffer
    /// without a copy.
    pub(crate) fn put(
        &self,
        hash: u128,
        raw: Blob,
        encoding: pb::ImageEncoding,
    ) -> Result<Blob, EncodeError> {
        let who = raw
            .lock_owners()
            .first()
            .cloned()
            .unwrap_or_else(|| Arc::from(""));
        let scope = self.scope_of(&who);
        let key = (scope, hash, pb::ImageEncoding::RawRgb);
        let (raw, made) = self.lookup(&key, || Ok(raw))?;
        let own = made || raw.owned_by(&who);
        self.count_lookup(&who, made, own, pb::ImageEncoding::RawRgb);
        raw.add_owner(&who);
        self.encoded(key.0, hash, raw, encoding, &who, own)
    }

    fn encoded(
        &self,
        scope: Arc<str>,
        hash: u128,
        raw: Blob,
        encoding: pb::ImageEncoding,
        who: &Arc<str>,
        own: bool,
    ) -> Result<Blob, EncodeError> {
        if matches!(
            encoding,
            pb::ImageEncoding::RawRgb | pb::ImageEncoding::Unspecified
        ) {
            return Ok(raw);
        }
        let (blob, made) = self.lookup(&(scope, hash, encoding), || {
            let frame = Frame {
                width: raw.width,
                height: raw.height,
                rgb: raw.bytes.to_vec(),
                hash,
            };
            Ok(Blob {
                width: raw.width,
                height: raw.height,
                bytes: Bytes::from(encode(frame, encoding)?),
                owners: raw.owners.clone(),
            })
        })?;
        self.count_lookup(who, made, own, encoding);
        Ok(blob)
    }

    /// A cached frame in `encoding`, encoding it from the cached raw frame if needed.
    /// `None` when the frame is not (or no longer) cached, or `who`'s envs never
    /// showed it (the same answer: no one learns what another principal's envs show).
    pub(crate) fn get(
        &self,
        hash: u128,
        encoding: pb::ImageEncoding,
        who: &Arc<str>,
    ) -> Result<Option<Blob>, EncodeError> {
        let scope = self.scope_of(who);
        if let Some(b) = self.cache.get(&(scope.clone(), hash, encoding)) {
            if !b.owned_by(who) {
                return Ok(None);
            }
            self.count(who, |c| {
                c.hits.fetch_add(1, Ordering::Relaxed);
            });
            return Ok(Some(b));
        }
        match self
            .cache
            .get(&(scope.clone(), hash, pb::ImageEncoding::RawRgb))
        {
            Some(raw) if raw.owned_by(who) => self
                .encoded(scope, hash, raw, encoding, who, true)
                .map(Some),
            _ => Ok(None),
        }
    }

    /// Counts a frame answered `not_modified` to `who` (its `bytes` were not sent).
    pub(crate) fn record_not_modified(&self, bytes: u64, who: &Arc<str>) {
        self.count(who, |c| {
            c.not_modified.fetch_add(1, Ordering::Relaxed);
            c.bytes_saved.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    /// `who`'s own counters, with no figure of the fleet's (entries, bytes,
    /// evictions, capacity are 0): what a principal of a server with tokens sees.
    pub(crate) fn stats_of(&self, who: &Arc<str>) -> pb::CacheStats {
        self.tenant(who).snapshot()
    }

    /// The fleet's counters.
    pub(crate) fn stats(&self) -> pb::CacheStats {
        pb::CacheStats {
            evictions: self.evictions.0.load(Ordering::Relaxed),
            entries: self.cache.len() as u64,
            bytes: self.cache.weight(),
            capacity_bytes: self.capacity,
            ..self.counters.snapshot()
        }
    }
}

impl Counters {
    /// The counters as the wire has them (the cache's own figures left at 0).
    fn snapshot(&self) -> pb::CacheStats {
        pb::CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            encodes: self.encodes.load(Ordering::Relaxed),
            encodes_saved: self.encodes_saved.load(Ordering::Relaxed),
            bytes_saved: self.bytes_saved.load(Ordering::Relaxed),
            not_modified: self.not_modified.load(Ordering::Relaxed),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deskgym_worker::hash_hex;

    fn put(c: &FrameCache, f: Frame, enc: pb::ImageEncoding) -> Result<Blob, EncodeError> {
        put_as(c, f, enc, "local")
    }

    fn put_as(
        c: &FrameCache,
        f: Frame,
        enc: pb::ImageEncoding,
        who: &str,
    ) -> Result<Blob, EncodeError> {
        let raw = Blob::new(f.width, f.height, Bytes::from(f.rgb), &Arc::from(who));
        c.put(f.hash, raw, enc)
    }

    #[test]
    fn a_frame_is_answered_only_to_principals_whose_envs_showed_it() {
        let c = FrameCache::new(64 << 20);
        let (alice, bob): (Arc<str>, Arc<str>) = (Arc::from("alice"), Arc::from("bob"));
        let f = frame(1, 32, 16);
        put_as(&c, f.clone(), pb::ImageEncoding::Png, "alice").unwrap();
        assert!(
            c.get(f.hash, pb::ImageEncoding::Png, &alice)
                .unwrap()
                .is_some()
        );
        // Bob holds the hash, not the frame: the same answer as an evicted frame.
        assert!(
            c.get(f.hash, pb::ImageEncoding::Png, &bob)
                .unwrap()
                .is_none()
        );
        assert!(
            c.get(f.hash, pb::ImageEncoding::RawRgb, &bob)
                .unwrap()
                .is_none()
        );
        // His own env showing the same pixels is a miss and an encode of his own:
        // nothing he sees depends on what Alice's screens showed.
        put_as(&c, f.clone(), pb::ImageEncoding::Png, "bob").unwrap();
        assert!(
            c.get(f.hash, pb::ImageEncoding::Png, &bob)
                .unwrap()
                .is_some()
        );
        assert_eq!(c.stats().encodes, 2);
        // Each sees its own counters; the fleet's figures stay out of them.
        assert_eq!(c.stats_of(&alice).misses, 2);
        assert_eq!((c.stats_of(&bob).misses, c.stats_of(&bob).hits), (2, 1));
        assert_eq!(c.stats_of(&bob).encodes_saved, 0);
        assert_eq!(c.stats_of(&bob).entries, 0);
    }

    #[test]
    fn a_sharing_group_dedups_but_counts_only_own_frames_as_hits() {
        let c = FrameCache::new(64 << 20);
        let group: Arc<str> = Arc::from("=lab");
        let (alice, bob): (Arc<str>, Arc<str>) = (Arc::from("alice"), Arc::from("bob"));
        c.scope(&alice, &group);
        c.scope(&bob, &group);
        let f = frame(1, 32, 16);
        put_as(&c, f.clone(), pb::ImageEncoding::Png, "alice").unwrap();
        put_as(&c, f.clone(), pb::ImageEncoding::Png, "bob").unwrap();
        // One encode for the group; Bob's own figures still say "miss".
        assert_eq!(c.stats().encodes, 1);
        assert_eq!((c.stats_of(&bob).hits, c.stats_of(&bob).misses), (0, 2));
        put_as(&c, f.clone(), pb::ImageEncoding::Png, "bob").unwrap();
        assert_eq!((c.stats_of(&bob).hits, c.stats_of(&bob).encodes), (2, 0));
    }

    fn frame(seed: u8, w: u32, h: u32) -> Frame {
        let rgb = (0..w * h * 3)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        Frame::from_rgb(w, h, rgb)
    }

    #[test]
    fn each_encoding_is_made_once() {
        let c = FrameCache::new(64 << 20);
        let f = frame(1, 32, 16);
        for _ in 0..3 {
            let b = put(&c, f.clone(), pb::ImageEncoding::Png).unwrap();
            assert!(b.bytes.starts_with(b"\x89PNG"));
        }
        let s = c.stats();
        assert_eq!((s.encodes, s.encodes_saved), (1, 2));
        assert_eq!(s.entries, 2, "raw + png");
    }

    #[test]
    fn concurrent_requests_wait_for_one_encode() {
        let c = Arc::new(FrameCache::new(64 << 20));
        let f = frame(2, 640, 480);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (c, f) = (c.clone(), f.clone());
                std::thread::spawn(move || put(&c, f, pb::ImageEncoding::Png).unwrap().bytes.len())
            })
            .collect();
        let lens: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(c.stats().encodes, 1);
    }

    #[test]
    fn eviction_never_returns_a_wrong_frame() {
        // Room for a handful of 48x48 raw frames only.
        let c = FrameCache::new(5 * (48 * 48 * 3 + ENTRY_OVERHEAD));
        let frames: Vec<_> = (0..40).map(|i| frame(i, 48, 48)).collect();
        for f in &frames {
            put(&c, f.clone(), pb::ImageEncoding::RawRgb).unwrap();
        }
        assert!(c.stats().evictions > 0);
        let mut found = 0;
        for f in &frames {
            if let Some(b) = c
                .get(f.hash, pb::ImageEncoding::RawRgb, &Arc::from("local"))
                .unwrap()
            {
                found += 1;
                assert_eq!(
                    deskgym_worker::frame_hash(b.width, b.height, &b.bytes),
                    f.hash,
                    "{}",
                    hash_hex(f.hash)
                );
            }
        }
        assert!(found > 0 && found < frames.len());
    }
}
