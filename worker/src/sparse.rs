//! Holes through a store that has none (Blob): where a local file holds data, taken when it
//! is uploaded, and which of a download's bytes are left unwritten so that they stay holes.
//!
//! A download never decides from the record alone: a block is left out only when its bytes
//! are all zeros, so a record that no longer describes the blob (another tool rewrote it)
//! costs holes, never bytes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use bytes::Bytes;

/// How a file was laid out at the source, where it had holes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sparse {
    /// Its data extents, (start, length) in order; every byte outside them was a hole.
    Extents(Vec<(u64, u64)>),
    /// It had holes; where was not recorded (too many extents for the room they get).
    Zeros,
}

impl Sparse {
    /// Of an open local file: None where it has as many blocks as its size needs (GNU cp's
    /// test, on a stat already taken), so a dense file costs no call; else its data extents by
    /// SEEK_DATA/SEEK_HOLE.
    pub fn of_file(f: &File, md: &std::fs::Metadata) -> io::Result<Option<Sparse>> {
        let size = md.len();
        if md.blocks().saturating_mul(512) >= size {
            return Ok(None);
        }
        let mut extents = Vec::new();
        let mut pos = 0;
        while pos < size {
            let Some(start) = seek(f, pos, libc::SEEK_DATA)?.filter(|&s| s < size) else {
                break;
            };
            let end = seek(f, start, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
            extents.push((start, end - start));
            pos = end;
        }
        Ok(Some(Sparse::Extents(extents)))
    }

    /// Whether every byte of `start..end` was in a hole at the source.
    pub fn in_hole(&self, start: u64, end: u64) -> bool {
        match self {
            Sparse::Zeros => true,
            Sparse::Extents(x) => {
                // The first extent that ends after `start`: the range is in a hole unless it
                // begins before `end`.
                let i = x.partition_point(|&(s, l)| s + l <= start);
                x.get(i).is_none_or(|&(s, _)| s >= end)
            }
        }
    }
}

/// lseek that answers None past the last data (ENXIO).
pub fn seek(f: &File, from: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    // SAFETY: a valid fd; lseek only moves the file position.
    let at = unsafe { libc::lseek(f.as_raw_fd(), from as libc::off_t, whence) };
    if at < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(at as u64))
}

/// The block size holes are made in on `f`'s filesystem: whole blocks of it are left
/// unwritten. Bounded, for filesystems that give a transfer size here (NFS, Lustre: up to
/// MiBs), which would otherwise leave few zero runs out.
pub fn block_of(f: &File) -> io::Result<u64> {
    Ok(f.metadata()?.blksize().clamp(512, 64 << 10))
}

/// Of `data` (pieces in order) to be written at `offset` of a file with blocks of `blk` bytes:
/// the runs to write, each an offset and its pieces, leaving out every block (or the part of
/// one `data` covers) whose bytes are all zeros and were in a hole at the source. A file sized
/// beforehand (ftruncate) reads zeros where nothing was written, and holds no block there.
pub fn runs(data: Vec<Bytes>, offset: u64, blk: u64, sparse: &Sparse) -> Vec<(u64, Vec<Bytes>)> {
    let mut out: Vec<(u64, Vec<Bytes>)> = Vec::new();
    let mut keep = |start: u64, block: &mut Vec<Bytes>| {
        let end = start + block.iter().map(|b| b.len() as u64).sum::<u64>();
        let pieces = std::mem::take(block);
        if sparse.in_hole(start, end) && pieces.iter().all(|p| zeros(p)) {
            return;
        }
        match out.last_mut() {
            Some((at, run)) if *at + run.iter().map(|b| b.len() as u64).sum::<u64>() == start => {
                run.extend(pieces)
            }
            _ => out.push((start, pieces)),
        }
    };
    let (mut pos, mut block_start, mut block) = (offset, offset, Vec::new());
    for mut piece in data {
        while !piece.is_empty() {
            let block_end = (pos / blk + 1) * blk;
            let n = piece.len().min((block_end - pos) as usize);
            block.push(piece.split_to(n));
            pos += n as u64;
            if pos == block_end {
                keep(block_start, &mut block);
                block_start = pos;
            }
        }
    }
    if !block.is_empty() {
        keep(block_start, &mut block);
    }
    out
}

fn zeros(b: &[u8]) -> bool {
    // Or-ing words: the compiler makes it a vector loop, where `all(== 0)` goes byte by byte.
    let words = b.chunks_exact(16);
    let tail = words.remainder();
    tail.iter().all(|&x| x == 0)
        && words.fold(0u128, |a, w| a | u128::from_ne_bytes(w.try_into().unwrap())) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(runs: &[(u64, Vec<Bytes>)]) -> Vec<(u64, Vec<u8>)> {
        runs.iter()
            .map(|(at, p)| (*at, p.iter().flat_map(|b| b.to_vec()).collect()))
            .collect()
    }

    #[test]
    fn holes_are_looked_up_in_the_extents() {
        let s = Sparse::Extents(vec![(4096, 4096), (65536, 10)]);
        assert!(s.in_hole(0, 4096));
        assert!(!s.in_hole(0, 4097));
        assert!(!s.in_hole(8191, 8192));
        assert!(s.in_hole(8192, 65536));
        assert!(!s.in_hole(65540, 65541));
        assert!(s.in_hole(65546, 1 << 30));
        assert!(Sparse::Extents(vec![]).in_hole(0, 1 << 40));
        assert!(Sparse::Zeros.in_hole(0, 1));
    }

    #[test]
    fn zero_blocks_in_holes_are_left_out_and_the_rest_merged() {
        // Three blocks of 8: zeros, data, zeros; given in pieces that cross the blocks.
        let mut bytes = [0u8; 24];
        bytes[9] = 7;
        let pieces = vec![
            Bytes::copy_from_slice(&bytes[..5]),
            Bytes::copy_from_slice(&bytes[5..13]),
            Bytes::copy_from_slice(&bytes[13..]),
        ];
        assert_eq!(
            flat(&runs(pieces.clone(), 0, 8, &Sparse::Zeros)),
            vec![(8, bytes[8..16].to_vec())]
        );
        // The source held data in the first block: its zeros are written, as it had them.
        assert_eq!(
            flat(&runs(
                pieces.clone(),
                0,
                8,
                &Sparse::Extents(vec![(0, 8), (8, 1)])
            )),
            vec![(0, bytes[..16].to_vec())]
        );
        // Bytes where the record says hole but that are not zeros are always written.
        assert_eq!(
            flat(&runs(pieces, 0, 8, &Sparse::Extents(vec![]))),
            vec![(8, bytes[8..16].to_vec())]
        );
        // Not starting on a block: the partial blocks at either end are judged alone.
        let mid = vec![Bytes::from(vec![0u8; 10]), Bytes::from(vec![1u8; 3])];
        assert_eq!(
            flat(&runs(mid, 13, 8, &Sparse::Zeros)),
            vec![(16, vec![0, 0, 0, 0, 0, 0, 0, 1, 1, 1])]
        );
    }

    #[test]
    fn zeros_are_found_at_any_alignment() {
        let mut v = [0u8; 100];
        for at in [0, 1, 7, 8, 50, 99] {
            assert!(zeros(&v[at..]));
            v[at] = 1;
            assert!(!zeros(&v[..]), "{at}");
            assert!(!zeros(&v[at..]), "{at}");
            v[at] = 0;
        }
    }
}
