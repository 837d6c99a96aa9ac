//! Shared-memory frames for a client on the server's host.
//!
//! grpcio copies every message it receives: a raw 1280x720 frame costs a Python client
//! about 10 ms a step while the server's own step costs under 2. A client that shares
//! the host asks for a *ring* (AttachFrames), collects its memory on the unix socket
//! ([`serve_handoff`], SCM_RIGHTS), and names it in its requests: the server writes each
//! frame into a free slot and the reply says where ([`pb::FrameSlot`]).
//!
//! A slot is free when it was never used or when the client wrote the slot's sequence
//! number into its *released* word: the server never writes a slot the client may still
//! be reading, so an observation the client keeps never changes under it. A client that
//! holds every slot gets its frames as bytes, as a remote client does. The memory is a
//! sealed memfd (the client can neither shrink nor grow it, so a write never faults),
//! never a path: only the connection that redeemed the ticket holds it, and the ring
//! is dropped when that connection closes.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deskgym_proto::v1 as pb;

use crate::spec::Invalid;

/// Slots when the request leaves it 0.
pub(crate) const DEFAULT_SLOTS: u32 = 64;
/// Most slots in one ring.
pub(crate) const MAX_SLOTS: u32 = 1024;
/// Bytes per slot when the request leaves it 0: a raw 1280x720 RGB frame.
pub(crate) const DEFAULT_SLOT_BYTES: u64 = 1280 * 720 * 3;
/// Most bytes per slot.
pub(crate) const MAX_SLOT_BYTES: u64 = 64 << 20;
/// Most bytes of rings one principal holds at once. Memory is committed only for
/// slots the server writes, but a client that never releases a slot gets every slot
/// written in time: this bounds what a tenant can make the server hold.
pub(crate) const MAX_RING_BYTES: u64 = 2 << 30;
/// Most rings one principal holds at once.
pub(crate) const MAX_RINGS_PER_PRINCIPAL: usize = 8;
/// How long a ticket waits to be redeemed before its ring is dropped.
pub(crate) const TICKET_TTL: Duration = Duration::from_secs(10);
/// The line a client sends on the unix socket to collect a ring: this, the ticket, "\n".
pub(crate) const HELLO: &[u8] = b"DESKGYM-RING ";
/// Bytes of one slot's record in the header (a cache line: the client's released
/// word and the server's published word of neighbouring slots never share one).
const RECORD: usize = 64;
const PAGE: u64 = 4096;

/// Why a ring could not be made or collected.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RingError {
    /// A malformed request field.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The server has no unix socket to hand the ring over on.
    #[error(
        "shared-memory frames are handed over on the server's unix socket: start it with \
         --listen unix:PATH and connect to that path"
    )]
    NoSocket,
    /// The principal holds its most rings, or its most ring bytes.
    #[error(
        "{who} holds {held} frame rings of {bytes} bytes in all; with this one it would pass \
         {MAX_RINGS_PER_PRINCIPAL} rings or {MAX_RING_BYTES} bytes: close a client (its \
         ring goes with its connection) or ask for fewer slots"
    )]
    Limit {
        /// The principal.
        who: String,
        /// Rings it holds.
        held: usize,
        /// Their bytes.
        bytes: u64,
    },
    /// The kernel refused the memory.
    #[error("making the frame ring: {0}")]
    Io(#[from] std::io::Error),
}

/// The ring's memory: a sealed memfd mapped shared.
struct Mapping {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; which thread may write which bytes is
// decided under `Ring::state` (a slot is written by one thread at a time), and the
// per-slot words are accessed only as atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Mapping {
    fn new(len: u64) -> std::io::Result<Self> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated name; the fd is owned right away.
        let raw = unsafe { libc::memfd_create(c"deskgym-frames".as_ptr(), flags) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len_off = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
        // SAFETY: plain syscalls on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len_off) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // A client that shrank the file would make the server's next write fault.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        // SAFETY: a fresh shared mapping of a file of exactly `len` bytes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            base: base.cast(),
            len,
        })
    }

    /// The 8-byte word at `at` (8-aligned, inside the header) as an atomic.
    fn word(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= self.len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned); the word is only
        // ever accessed atomically, here and by the client.
        unsafe { &*(self.base.add(at).cast::<AtomicU64>()) }
    }
}

/// Which slots the server may write.
struct State {
    next_seq: u64,
    /// Each slot's last sequence handed out (0: never used).
    published: Vec<u64>,
    /// Slots being written right now.
    busy: Vec<bool>,
}

/// One client's frame ring.
pub(crate) struct Ring {
    /// The ring's id (requests' `frame_ring`).
    pub(crate) id: u64,
    /// The principal it belongs to.
    pub(crate) owner: Arc<str>,
    map: Mapping,
    slots: u32,
    slot_bytes: usize,
    data_offset: usize,
    state: Mutex<State>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("slots", &self.slots)
            .field("slot_bytes", &self.slot_bytes)
            .finish()
    }
}

impl Ring {
    fn new(id: u64, owner: Arc<str>, slots: u32, slot_bytes: u64) -> Result<Self, RingError> {
        let slots = match slots {
            0 => DEFAULT_SLOTS,
            n if n > MAX_SLOTS => {
                return Err(Invalid::new("slots", format!("{n} is over {MAX_SLOTS}")).into());
            }
            n => n,
        };
        let slot_bytes = match slot_bytes {
            0 => DEFAULT_SLOT_BYTES,
            n if n > MAX_SLOT_BYTES => {
                let msg = format!("{n} is over {MAX_SLOT_BYTES} (64 MiB)");
                return Err(Invalid::new("slot_bytes", msg).into());
            }
            n => n,
        };
        // Whole pages: a slot that is never written commits no memory.
        let slot_bytes = slot_bytes.div_ceil(PAGE) * PAGE;
        let header = (u64::from(slots) * RECORD as u64).div_ceil(PAGE) * PAGE;
        let size = header + u64::from(slots) * slot_bytes;
        if size > MAX_RING_BYTES {
            let msg = format!(
                "slots x slot_bytes is {size} bytes, over {MAX_RING_BYTES} (2 GiB): ask for fewer"
            );
            return Err(Invalid::new("slot_bytes", msg).into());
        }
        let map = Mapping::new(size)?;
        Ok(Self {
            id,
            owner,
            map,
            slots,
            slot_bytes: slot_bytes as usize,
            data_offset: header as usize,
            state: Mutex::new(State {
                next_seq: 1,
                published: vec![0; slots as usize],
                busy: vec![false; slots as usize],
            }),
        })
    }

    fn released(&self, slot: usize) -> u64 {
        self.map.word(slot * RECORD + 8).load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `bytes` into a free slot (the lowest: a client that holds few frames
    /// touches few pages) and says where; `None` when no slot is free or the bytes do
    /// not fit one.
    pub(crate) fn place(&self, bytes: &[u8]) -> Option<pb::FrameSlot> {
        if bytes.len() > self.slot_bytes {
            return None;
        }
        let (slot, seq) = {
            let mut st = self.lock();
            let slot = (0..self.slots as usize).find(|&i| {
                !st.busy[i] && (st.published[i] == 0 || self.released(i) == st.published[i])
            })?;
            let seq = st.next_seq;
            st.next_seq += 1;
            st.published[slot] = seq;
            st.busy[slot] = true;
            (slot, seq)
        };
        let offset = self.data_offset + slot * self.slot_bytes;
        // SAFETY: `offset + len` lies inside the mapping (len <= slot_bytes); only this
        // thread writes the slot while it is busy, and the client reads it only after
        // the reply that names `seq`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.base.add(offset), bytes.len());
        }
        self.map.word(slot * RECORD).store(seq, Ordering::Release);
        self.lock().busy[slot] = false;
        Some(pb::FrameSlot {
            ring: self.id,
            slot: slot as u32,
            seq,
            offset: offset as u64,
            length: bytes.len() as u64,
        })
    }

    /// Moves an observation's pixels into the ring when they fit a free slot.
    pub(crate) fn deliver(&self, obs: &mut pb::Observation) {
        if obs.frame.is_empty() {
            return;
        }
        if let Some(slot) = self.place(&obs.frame) {
            obs.frame = Default::default();
            obs.slot = Some(slot);
        }
    }

    /// The layout a client maps (AttachFramesResponse without the ticket).
    fn layout(&self) -> pb::AttachFramesResponse {
        pb::AttachFramesResponse {
            ring: self.id,
            ticket: String::new(),
            slots: self.slots,
            slot_bytes: self.slot_bytes as u64,
            data_offset: self.data_offset as u64,
            size: self.map.len as u64,
        }
    }
}

/// Moves the pixels of every observation of a step result into `ring`.
pub(crate) fn deliver_step(ring: &Ring, r: &mut pb::StepResult) {
    if let Some(o) = r.observation.as_mut() {
        ring.deliver(o);
    }
    if let Some(o) = r.reset.as_mut().and_then(|r| r.observation.as_mut()) {
        ring.deliver(o);
    }
}

struct Entry {
    ring: Arc<Ring>,
    /// Until redeemed: the ticket and when it stops being good.
    ticket: Option<(String, std::time::Instant)>,
}

/// Every ring of the server, by id.
#[derive(Default)]
pub(crate) struct Rings {
    /// Whether the server listens on a unix socket (else AttachFrames refuses).
    enabled: bool,
    next_id: AtomicU64,
    rings: Mutex<HashMap<u64, Entry>>,
}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("enabled", &self.enabled)
            .field("rings", &self.len())
            .finish()
    }
}

impl Rings {
    /// Rings handed over on a unix socket (`enabled`), or none at all.
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            next_id: AtomicU64::new(1),
            rings: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.rings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rings alive (collected or waiting to be).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// A new ring for `owner`, waiting for its ticket to be redeemed.
    pub(crate) fn attach(
        &self,
        owner: &Arc<str>,
        r: &pb::AttachFramesRequest,
    ) -> Result<pb::AttachFramesResponse, RingError> {
        if !self.enabled {
            return Err(RingError::NoSocket);
        }
        self.sweep();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ring = Arc::new(Ring::new(id, owner.clone(), r.slots, r.slot_bytes)?);
        let (held, bytes) = self
            .lock()
            .values()
            .filter(|e| e.ring.owner == *owner)
            .fold((0, 0u64), |(n, b), e| (n + 1, b + e.ring.map.len as u64));
        if held >= MAX_RINGS_PER_PRINCIPAL || bytes + ring.map.len as u64 > MAX_RING_BYTES {
            return Err(RingError::Limit {
                who: owner.to_string(),
                held,
                bytes,
            });
        }
        let ticket = ticket()?;
        let mut out = ring.layout();
        out.ticket = ticket.clone();
        let due = std::time::Instant::now() + TICKET_TTL;
        self.lock().insert(
            id,
            Entry {
                ring,
                ticket: Some((ticket, due)),
            },
        );
        Ok(out)
    }

    /// Drops rings whose ticket expired unredeemed.
    fn sweep(&self) {
        let now = std::time::Instant::now();
        self.lock()
            .retain(|_, e| e.ticket.as_ref().is_none_or(|(_, due)| *due > now));
    }

    /// The ring a ticket names, once: later calls with the same ticket get `None`.
    pub(crate) fn redeem(&self, ticket: &str) -> Option<Arc<Ring>> {
        self.sweep();
        let mut rings = self.lock();
        let e = rings
            .values_mut()
            .find(|e| e.ticket.as_ref().is_some_and(|(t, _)| t == ticket))?;
        e.ticket = None;
        Some(e.ring.clone())
    }

    /// Forgets a ring (its client's connection closed).
    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// `owner`'s collected ring `id`, or an error naming the field that asked for it.
    /// Another principal's ring reads as missing, as its pools do.
    pub(crate) fn get(&self, id: u64, owner: &str, field: &str) -> Result<Arc<Ring>, Invalid> {
        self.lock()
            .get(&id)
            .filter(|e| e.ticket.is_none() && &*e.ring.owner == owner)
            .map(|e| e.ring.clone())
            .ok_or_else(|| {
                Invalid::new(
                    field,
                    format!(
                        "no frame ring {id} of yours is attached (its connection closed, or \
                         it was never collected): attach again, or send 0 for bytes"
                    ),
                )
            })
    }
}

/// 128 random bits as hex.
fn ticket() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    // SAFETY: writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Serves one ring collection on a unix connection whose first bytes are [`HELLO`]:
/// reads the ticket line, sends one byte with the ring's memfd, then holds the ring
/// until the client closes the connection. A bad ticket gets "-" and the connection
/// closes.
pub(crate) async fn serve_handoff(stream: tokio::net::UnixStream, rings: Arc<Rings>) {
    use tokio::io::AsyncReadExt as _;
    let mut stream = stream;
    let mut line = Vec::with_capacity(64);
    let read = async {
        let mut b = [0u8; 1];
        while line.len() < HELLO.len() + 64 {
            if stream.read(&mut b).await.ok()? == 0 {
                return None;
            }
            if b[0] == b'\n' {
                return Some(());
            }
            line.push(b[0]);
        }
        None
    };
    // A connection that names no ticket soon holds nothing.
    let got = tokio::time::timeout(Duration::from_secs(5), read).await;
    let ticket = match got {
        Ok(Some(())) => line
            .strip_prefix(HELLO)
            .and_then(|t| std::str::from_utf8(t).ok()),
        _ => None,
    };
    let Some(ring) = ticket.and_then(|t| rings.redeem(t)) else {
        let _ = send_fd(&stream, None).await;
        return;
    };
    if send_fd(&stream, Some(&ring.map.fd)).await.is_err() {
        rings.remove(ring.id);
        return;
    }
    tracing::debug!(ring = ring.id, owner = %ring.owner, "frame ring collected");
    // The ring lives as long as this connection: a client that exits (or dies)
    // closes it, and its ring goes.
    let mut sink = [0u8; 64];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    rings.remove(ring.id);
    tracing::debug!(ring = ring.id, "frame ring closed");
}

/// Sends one byte, "+" with `fd` attached (SCM_RIGHTS) or "-" without.
async fn send_fd(stream: &tokio::net::UnixStream, fd: Option<&OwnedFd>) -> std::io::Result<()> {
    loop {
        stream.writable().await?;
        match stream.try_io(tokio::io::Interest::WRITABLE, || sendmsg(stream, fd)) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

fn sendmsg(stream: &tokio::net::UnixStream, fd: Option<&OwnedFd>) -> std::io::Result<()> {
    let byte = [if fd.is_some() { b'+' } else { b'-' }];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // Room for one descriptor, aligned as a cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let raw = fd.as_raw_fd();
        // SAFETY: CMSG_SPACE of one int fits `control` (64 bytes); the header is written
        // through CMSG_FIRSTHDR of a msghdr that points at it.
        unsafe {
            let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), raw);
        }
    }
    // SAFETY: `msg` is fully initialised above; the socket is ours.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(slots: u32, slot_bytes: u64) -> Ring {
        Ring::new(1, Arc::from("me"), slots, slot_bytes).unwrap()
    }

    fn release(r: &Ring, s: &pb::FrameSlot) {
        r.map
            .word(s.slot as usize * RECORD + 8)
            .store(s.seq, Ordering::Release);
    }

    fn read(r: &Ring, s: &pb::FrameSlot) -> Vec<u8> {
        // SAFETY: in bounds of the mapping (the test's own slot).
        unsafe {
            std::slice::from_raw_parts(r.map.base.add(s.offset as usize), s.length as usize)
                .to_vec()
        }
    }

    #[test]
    fn a_held_slot_is_never_rewritten_and_a_released_one_is_reused() {
        let r = ring(2, 16);
        let a = r.place(b"first").unwrap();
        let b = r.place(b"second").unwrap();
        assert_ne!(a.slot, b.slot);
        // Both held: the third frame has no slot (bytes on the wire instead).
        assert!(r.place(b"third").is_none());
        assert_eq!(read(&r, &a), b"first");
        // Releasing an old sequence number frees nothing.
        r.map
            .word(a.slot as usize * RECORD + 8)
            .store(a.seq - 1, Ordering::Release);
        assert!(r.place(b"third").is_none());
        release(&r, &a);
        let c = r.place(b"third").unwrap();
        assert_eq!((c.slot, c.seq), (a.slot, 3));
        assert_eq!(read(&r, &c), b"third");
        assert_eq!(read(&r, &b), b"second");
        assert_eq!(
            r.map.word(c.slot as usize * RECORD).load(Ordering::Acquire),
            3
        );
    }

    #[test]
    fn frames_over_a_slot_go_as_bytes() {
        let r = ring(1, 1);
        // Slots are whole pages.
        assert!(r.place(&vec![7; 4096]).is_some());
        let r = ring(1, 1);
        assert!(r.place(&vec![7; 4097]).is_none());
        let mut obs = pb::Observation {
            frame: vec![1u8; 5000].into(),
            ..Default::default()
        };
        r.deliver(&mut obs);
        assert!(obs.slot.is_none() && obs.frame.len() == 5000);
    }

    #[test]
    fn bad_sizes_name_their_field() {
        let e = Ring::new(1, Arc::from("me"), MAX_SLOTS + 1, 0).unwrap_err();
        assert!(e.to_string().contains("slots"), "{e}");
        let e = Ring::new(1, Arc::from("me"), 0, MAX_SLOT_BYTES + 1).unwrap_err();
        assert!(e.to_string().contains("slot_bytes"), "{e}");
        let e = Ring::new(1, Arc::from("me"), MAX_SLOTS, MAX_SLOT_BYTES).unwrap_err();
        assert!(e.to_string().contains("2 GiB"), "{e}");
    }

    #[test]
    fn the_memory_cannot_be_shrunk_under_the_server() {
        let r = ring(1, 4096);
        // SAFETY: a syscall on the ring's own descriptor.
        let rc = unsafe { libc::ftruncate(r.map.fd.as_raw_fd(), 0) };
        assert_eq!(rc, -1, "a sealed memfd refuses to shrink");
    }

    #[test]
    fn tickets_are_single_use_and_rings_are_per_principal() {
        let rings = Rings::new(true);
        let me: Arc<str> = Arc::from("me");
        let a = rings
            .attach(&me, &pb::AttachFramesRequest::default())
            .unwrap();
        assert_eq!(a.slots, DEFAULT_SLOTS);
        // Not collected yet: requests cannot name it.
        assert!(rings.get(a.ring, "me", "frame_ring").is_err());
        assert!(rings.redeem(&a.ticket).is_some());
        assert!(rings.redeem(&a.ticket).is_none());
        assert!(rings.get(a.ring, "me", "frame_ring").is_ok());
        let e = rings.get(a.ring, "you", "frame_ring").unwrap_err();
        assert!(e.to_string().contains("frame_ring"), "{e}");
        for _ in 1..MAX_RINGS_PER_PRINCIPAL {
            rings
                .attach(&me, &pb::AttachFramesRequest::default())
                .unwrap();
        }
        assert!(matches!(
            rings.attach(&me, &pb::AttachFramesRequest::default()),
            Err(RingError::Limit { .. })
        ));
        rings.remove(a.ring);
        assert!(
            rings
                .attach(&me, &pb::AttachFramesRequest::default())
                .is_ok()
        );
        // Bytes are bounded per principal too, not only per ring.
        let big = pb::AttachFramesRequest {
            slots: 1000,
            slot_bytes: 1 << 20,
        };
        let you: Arc<str> = Arc::from("you");
        rings.attach(&you, &big).unwrap();
        rings.attach(&you, &big).unwrap();
        let e = rings.attach(&you, &big).unwrap_err();
        assert!(matches!(e, RingError::Limit { held: 2, .. }), "{e}");
        let off = Rings::new(false);
        assert!(matches!(
            off.attach(&me, &pb::AttachFramesRequest::default()),
            Err(RingError::NoSocket)
        ));
    }
}
