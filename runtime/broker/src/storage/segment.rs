//! One log segment: a run of record batches starting at `base_offset`, with a
//! sparse offset index and a time index, on disk or in memory.
//!
//! Files, as in Kafka: `<base_offset:020>.log` (batches end to end, exactly as
//! produced apart from the stamped base offset and leader epoch),
//! `<base_offset:020>.index` (pairs of relative offset u32 / byte position u32)
//! and `<base_offset:020>.timeindex` (timestamp i64 / relative offset u32).
//!
//! Invariants:
//! - Index entries are sparse (one per `index.interval.bytes` of appended data)
//!   and strictly increasing in both columns; a lookup returns the last entry at
//!   or before the target and the reader scans forward from there.
//! - The indexes live in memory while the segment is open and are written when
//!   the segment is rolled or the log closes. An index file that is missing or
//!   does not end on an entry boundary is rebuilt from the log on open.
//! - `size` always ends on a batch boundary: appends write whole batches, and
//!   recovery truncates a torn tail.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rill_protocol::records::{
    self, validate_batch, BatchHeader, ControlRecordType, BATCH_HEADER_LEN,
};

/// Storage behind a segment.
enum Data {
    Memory(Vec<u8>),
    File { file: File, path: PathBuf },
}

pub(crate) struct Segment {
    pub base_offset: i64,
    data: Data,
    size: u64,
    /// (relative offset, position) of some batch starts.
    index: Vec<(u32, u32)>,
    /// (max timestamp so far, relative offset of the batch carrying it).
    time_index: Vec<(i64, u32)>,
    bytes_since_index: u64,
    /// Offset after the last batch appended (== base_offset when empty).
    pub next_offset: i64,
    /// Largest record timestamp in the segment (-1 when empty).
    pub max_timestamp: i64,
    /// Wall-clock ms when the segment was created (for `segment.ms`).
    pub created_ms: i64,
    /// Wall-clock ms of the last append (retention falls back to it when
    /// records carry no timestamps).
    pub last_modified_ms: i64,
}

/// A batch found by a scan: where it starts and its header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub position: u64,
    pub header: BatchHeader,
}

pub(crate) fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

impl Segment {
    pub fn new_memory(base_offset: i64, now_ms: i64) -> Self {
        Self::with_data(base_offset, Data::Memory(Vec::new()), 0, now_ms)
    }

    /// Creates an empty segment file (truncating a stale one left by a crash).
    pub fn create_file(dir: &Path, base_offset: i64, now_ms: i64) -> io::Result<Self> {
        let path = dir.join(format!("{}.log", file_stem(base_offset)));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        for ext in ["index", "timeindex"] {
            let _ = std::fs::remove_file(dir.join(format!("{}.{ext}", file_stem(base_offset))));
        }
        Ok(Self::with_data(
            base_offset,
            Data::File { file, path },
            0,
            now_ms,
        ))
    }

    fn with_data(base_offset: i64, data: Data, size: u64, now_ms: i64) -> Self {
        Self {
            base_offset,
            data,
            size,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            created_ms: now_ms,
            last_modified_ms: now_ms,
        }
    }

    /// Opens an existing segment file. With `recover`, every batch is read and
    /// CRC-checked, a torn or corrupt tail is truncated, and the indexes are
    /// rebuilt; `on_batch` sees each valid batch in order. Without `recover`
    /// the saved indexes are trusted when they look sound (and rebuilt when
    /// not) and `on_batch` is not called.
    pub fn open_file(
        path: &Path,
        base_offset: i64,
        index_interval: u64,
        recover: bool,
        on_batch: &mut dyn FnMut(&BatchHeader, Option<ControlRecordType>),
    ) -> io::Result<(Self, Option<String>)> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let meta = file.metadata()?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let size = meta.len();
        let mut seg = Self::with_data(
            base_offset,
            Data::File {
                file,
                path: path.to_path_buf(),
            },
            size,
            mtime,
        );
        let mut problem = None;
        let loaded = !recover && seg.load_indexes(path).unwrap_or(false);
        if !loaded {
            problem = seg.rebuild(index_interval, recover, on_batch)?;
        }
        Ok((seg, problem))
    }

    /// Loads saved index files; `Ok(false)` if they are absent or unsound.
    fn load_indexes(&mut self, log_path: &Path) -> io::Result<bool> {
        let idx_path = log_path.with_extension("index");
        let tidx_path = log_path.with_extension("timeindex");
        let (Ok(idx), Ok(tidx)) = (std::fs::read(&idx_path), std::fs::read(&tidx_path)) else {
            return Ok(false);
        };
        // The saved files end with a trailer: next_offset i64, max_timestamp i64.
        if idx.len() < 16 || (idx.len() - 16) % 8 != 0 || tidx.len() % 12 != 0 {
            return Ok(false);
        }
        let body = &idx[..idx.len() - 16];
        let mut index = Vec::with_capacity(body.len() / 8);
        for e in body.chunks_exact(8) {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if pos as u64 >= self.size || index.last().is_some_and(|&(r, p)| r >= rel || p >= pos) {
                return Ok(false);
            }
            index.push((rel, pos));
        }
        let trailer = &idx[idx.len() - 16..];
        let next_offset = i64::from_be_bytes(trailer[..8].try_into().unwrap());
        let max_ts = i64::from_be_bytes(trailer[8..].try_into().unwrap());
        if next_offset < self.base_offset || (self.size == 0) != (next_offset == self.base_offset) {
            return Ok(false);
        }
        let mut time_index = Vec::with_capacity(tidx.len() / 12);
        for e in tidx.chunks_exact(12) {
            let ts = i64::from_be_bytes(e[..8].try_into().unwrap());
            let rel = u32::from_be_bytes(e[8..].try_into().unwrap());
            time_index.push((ts, rel));
        }
        self.index = index;
        self.time_index = time_index;
        self.next_offset = next_offset;
        self.max_timestamp = max_ts;
        Ok(true)
    }

    /// Writes the in-memory indexes next to the segment file.
    pub fn save_indexes(&self) -> io::Result<()> {
        let Data::File { path, .. } = &self.data else {
            return Ok(());
        };
        let mut idx = Vec::with_capacity(self.index.len() * 8 + 16);
        for &(rel, pos) in &self.index {
            idx.extend_from_slice(&rel.to_be_bytes());
            idx.extend_from_slice(&pos.to_be_bytes());
        }
        idx.extend_from_slice(&self.next_offset.to_be_bytes());
        idx.extend_from_slice(&self.max_timestamp.to_be_bytes());
        let mut tidx = Vec::with_capacity(self.time_index.len() * 12);
        for &(ts, rel) in &self.time_index {
            tidx.extend_from_slice(&ts.to_be_bytes());
            tidx.extend_from_slice(&rel.to_be_bytes());
        }
        write_atomically(&path.with_extension("index"), &idx)?;
        write_atomically(&path.with_extension("timeindex"), &tidx)
    }

    /// Rescans the whole segment, rebuilding indexes and (when `validate`)
    /// checking CRCs; truncates at the first bad batch and reports why.
    fn rebuild(
        &mut self,
        index_interval: u64,
        validate: bool,
        on_batch: &mut dyn FnMut(&BatchHeader, Option<ControlRecordType>),
    ) -> io::Result<Option<String>> {
        self.index.clear();
        self.time_index.clear();
        self.bytes_since_index = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        let size = self.size;
        let mut good_end = 0u64;
        let mut problem = None;
        {
            let mut reader = SegmentReader::new(self, 0, size);
            let mut headers = Vec::new();
            loop {
                match reader.next_batch(validate) {
                    Ok(Some((pos, h))) => {
                        if h.base_offset < self.base_offset
                            || h.base_offset - self.base_offset > u32::MAX as i64
                        {
                            problem = Some(format!(
                                "batch at position {pos} has offset {} outside segment {}",
                                h.base_offset, self.base_offset
                            ));
                            break;
                        }
                        headers.push((pos, h));
                        good_end = pos + h.total_size() as u64;
                    }
                    Ok(None) => break,
                    Err(reason) => {
                        problem = Some(reason);
                        break;
                    }
                }
            }
            for (pos, h) in headers {
                self.note_batch(pos, &h, index_interval);
                // Markers are rare and tiny: reading them back is what lets
                // recovery rebuild the aborted-transaction index.
                let marker = if h.is_control() {
                    self.read_at(pos, h.total_size())
                        .ok()
                        .and_then(|b| records::control_batch_type(&bytes::Bytes::from(b)))
                } else {
                    None
                };
                on_batch(&h, marker);
            }
        }
        if good_end < size {
            if problem.is_none() {
                problem = Some(format!("{} trailing bytes", size - good_end));
            }
            self.truncate_bytes(good_end)?;
        }
        Ok(problem)
    }

    fn note_batch(&mut self, position: u64, h: &BatchHeader, index_interval: u64) {
        let rel = (h.base_offset - self.base_offset) as u32;
        if self.index.is_empty() || self.bytes_since_index >= index_interval {
            self.index.push((rel, position as u32));
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_size() as u64;
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.time_index.push((h.max_timestamp, rel));
        }
        self.next_offset = h.next_offset();
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Appends one validated batch whose base offset has been stamped.
    pub fn append(
        &mut self,
        batch: &[u8],
        h: &BatchHeader,
        index_interval: u64,
        now_ms: i64,
    ) -> io::Result<()> {
        let position = self.size;
        match &mut self.data {
            Data::Memory(v) => v.extend_from_slice(batch),
            Data::File { file, .. } => file.write_all_at(batch, position)?,
        }
        self.size += batch.len() as u64;
        self.last_modified_ms = now_ms;
        self.note_batch(position, h, index_interval);
        Ok(())
    }

    pub fn fsync(&self) -> io::Result<()> {
        match &self.data {
            Data::Memory(_) => Ok(()),
            Data::File { file, .. } => file.sync_data(),
        }
    }

    pub fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = (position + len as u64).min(self.size);
        let len = end.saturating_sub(position) as usize;
        match &self.data {
            Data::Memory(v) => Ok(v[position as usize..position as usize + len].to_vec()),
            Data::File { file, .. } => read_exact_uninit(file, position, len),
        }
    }

    /// The first batch whose last offset is at or after `offset`.
    pub fn locate_offset(&self, offset: i64) -> io::Result<Option<Located>> {
        let rel = (offset - self.base_offset).clamp(0, u32::MAX as i64) as u32;
        let start = match self.index.partition_point(|&(r, _)| r <= rel) {
            0 => 0,
            i => self.index[i - 1].1 as u64,
        };
        let mut reader = SegmentReader::new(self, start, self.size);
        while let Some((position, header)) = reader.next_batch(false).map_err(io::Error::other)? {
            if header.last_offset() >= offset {
                return Ok(Some(Located { position, header }));
            }
        }
        Ok(None)
    }

    /// The first batch whose max timestamp is at or after `timestamp`.
    pub fn locate_timestamp(&self, timestamp: i64) -> io::Result<Option<Located>> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        // The time index gives a batch at or before the first match.
        let start_rel = match self.time_index.partition_point(|&(ts, _)| ts < timestamp) {
            0 => 0,
            i => self.time_index[i - 1].1,
        };
        let start_offset = self.base_offset + start_rel as i64;
        let Some(mut at) = self.locate_offset(start_offset)? else {
            return Ok(None);
        };
        let mut reader = SegmentReader::new(self, at.position, self.size);
        while let Some((position, header)) = reader.next_batch(false).map_err(io::Error::other)? {
            if header.max_timestamp >= timestamp {
                at = Located { position, header };
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    fn truncate_bytes(&mut self, len: u64) -> io::Result<()> {
        match &mut self.data {
            Data::Memory(v) => v.truncate(len as usize),
            Data::File { file, .. } => file.set_len(len)?,
        }
        self.size = len;
        Ok(())
    }

    /// Replaces the segment's contents (compaction output) and rebuilds indexes.
    pub fn replace_contents(&mut self, bytes: &[u8], index_interval: u64) -> io::Result<()> {
        match &mut self.data {
            Data::Memory(v) => {
                v.clear();
                v.extend_from_slice(bytes);
            }
            Data::File { file, path } => {
                let tmp = path.with_extension("cleaned");
                {
                    let mut f = File::create(&tmp)?;
                    f.write_all(bytes)?;
                    f.sync_data()?;
                }
                std::fs::rename(&tmp, &*path)?;
                *file = OpenOptions::new().read(true).write(true).open(&*path)?;
            }
        }
        self.size = bytes.len() as u64;
        let next = self.next_offset;
        self.rebuild(index_interval, false, &mut |_, _| {})?;
        // Compaction may drop the last records; the segment still covers them.
        self.next_offset = next;
        self.save_indexes()
    }

    /// Removes the segment's files.
    pub fn delete(self) -> io::Result<()> {
        if let Data::File { path, file } = self.data {
            drop(file);
            for ext in ["index", "timeindex"] {
                let _ = std::fs::remove_file(path.with_extension(ext));
            }
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

/// Sequential batch reader over a segment, reading in large chunks.
pub(crate) struct SegmentReader<'a> {
    segment: &'a Segment,
    pos: u64,
    end: u64,
    file_reader: Option<BufReader<FileSlice<'a>>>,
    /// Read position for in-memory segments.
    mem_pos: u64,
}

struct FileSlice<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for FileSlice<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.end.saturating_sub(self.pos)) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Seek for FileSlice<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let target = match to {
            io::SeekFrom::Start(n) => n as i128,
            io::SeekFrom::Current(n) => self.pos as i128 + n as i128,
            io::SeekFrom::End(n) => self.end as i128 + n as i128,
        };
        if target < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start",
            ));
        }
        self.pos = target as u64;
        Ok(self.pos)
    }
}

impl<'a> SegmentReader<'a> {
    pub fn new(segment: &'a Segment, pos: u64, end: u64) -> Self {
        let file_reader = match &segment.data {
            Data::File { file, .. } => Some(BufReader::with_capacity(
                256 * 1024,
                FileSlice { file, pos, end },
            )),
            Data::Memory(_) => None,
        };
        Self {
            segment,
            pos,
            end,
            file_reader,
            mem_pos: pos,
        }
    }

    /// The next whole batch, or `Ok(None)` at the end. `Err` describes a
    /// malformed or (with `validate`) corrupt batch at the current position.
    pub fn next_batch(&mut self, validate: bool) -> Result<Option<(u64, BatchHeader)>, String> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let remaining = self.end - self.pos;
        if remaining < BATCH_HEADER_LEN as u64 {
            return Err(format!("torn batch header at position {}", self.pos));
        }
        let at = self.pos;
        let mut head = [0u8; BATCH_HEADER_LEN];
        self.read_exact(&mut head)?;
        let h = BatchHeader::parse(&head).map_err(|e| e.to_string())?;
        if h.batch_length < (BATCH_HEADER_LEN - 12) as i32 || h.total_size() as u64 > remaining {
            return Err(format!(
                "batch at position {at} has length {} with {remaining} bytes left",
                h.batch_length
            ));
        }
        let rest = h.total_size() - BATCH_HEADER_LEN;
        if validate {
            let mut whole = Vec::with_capacity(h.total_size());
            whole.extend_from_slice(&head);
            whole.resize(h.total_size(), 0);
            self.read_exact(&mut whole[BATCH_HEADER_LEN..])?;
            validate_batch(&whole, false).map_err(|e| format!("batch at position {at}: {e}"))?;
        } else {
            self.skip(rest as u64)?;
        }
        self.pos = at + h.total_size() as u64;
        Ok(Some((at, h)))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), String> {
        match (&mut self.file_reader, &self.segment.data) {
            (Some(r), _) => r.read_exact(buf).map_err(|e| format!("read failed: {e}"))?,
            (None, Data::Memory(v)) => {
                let start = self.mem_pos as usize;
                buf.copy_from_slice(&v[start..start + buf.len()]);
                self.mem_pos += buf.len() as u64;
            }
            (None, Data::File { .. }) => unreachable!("file segments always have a reader"),
        }
        Ok(())
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        match &mut self.file_reader {
            Some(r) => {
                r.seek_relative(n as i64)
                    .map_err(|e| format!("seek failed: {e}"))?;
            }
            None => self.mem_pos += n,
        }
        Ok(())
    }
}

/// `pread`s `len` bytes into a fresh vector without zero-filling it first:
/// fetches read up to a megabyte per partition, and the memset showed up in
/// the fetch path's profile.
#[allow(unsafe_code)] // pread(2) into spare capacity: no zero-fill on the fetch path
fn read_exact_uninit(file: &File, position: u64, len: usize) -> io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let done = buf.len();
        // SAFETY: pread writes at most `len - done` bytes into the spare
        // capacity starting at `done`, which the allocation above provides.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(done) as *mut libc::c_void,
                len - done,
                (position + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "segment shorter than its recorded size",
            ));
        }
        // SAFETY: the first `done + n` bytes are now initialised.
        unsafe { buf.set_len(done + n as usize) };
    }
    Ok(buf)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
    }
    std::fs::rename(tmp, path)
}
