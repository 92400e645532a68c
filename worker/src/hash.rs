//! MD5 (RFC 1321), with a way to take two digests in one pass over the bytes.
//!
//! An upload needs both the object's MD5 (its Content-MD5) and each block's (the block's ID and
//! its transactional check). MD5 is one long chain of dependent additions, so one stream leaves
//! most of a core's execution units idle: stepping the object's state and the block's state
//! together over the same 64-byte chunks gives both digests in about the time of one. The
//! campaign's upload rows show it as CPU seconds per GiB (`benchmarks/results/azurite.md`).
//! One digest alone (a download's check, a verify) runs on x86-64 in assembly (`x86_64.rs`).

#[cfg(target_arch = "x86_64")]
mod x86_64;

/// The sines table of RFC 1321: `floor(abs(sin(i + 1)) × 2³²)`.
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];
/// Left rotations, by round and step within the round.
const S: [[u32; 4]; 4] = [
    [7, 12, 17, 22],
    [5, 9, 14, 20],
    [4, 11, 16, 23],
    [6, 10, 15, 21],
];
const INIT: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];

/// One of the 64 steps, for each of `N` states. `I` is a constant so that every index, rotation
/// and round function is fixed at compile time; the lanes are independent, so their
/// dependency chains interleave.
#[inline(always)]
fn step<const I: usize, const N: usize>(v: &mut [[u32; 4]; N], m: &[u32; 16]) {
    let (round, j) = (I / 16, I % 16);
    let g = match round {
        0 => j,
        1 => (5 * j + 1) % 16,
        2 => (3 * j + 5) % 16,
        _ => 7 * j % 16,
    };
    for lane in v.iter_mut() {
        let [a, b, c, d] = *lane;
        // What does not wait for `b`, the previous step's result, is summed first, and the
        // round functions are in the forms with the fewest operations after `b`: the chain
        // from one step to the next is what bounds MD5's speed.
        let early = a.wrapping_add(K[I]).wrapping_add(m[g]);
        let t = match round {
            0 => early.wrapping_add(d ^ (b & (c ^ d))),
            // (b ∧ d) ∨ (c ∧ ¬d): the two terms never share a bit, so they can be added.
            1 => early.wrapping_add(c & !d).wrapping_add(b & d),
            2 => early.wrapping_add(b ^ (c ^ d)),
            _ => early.wrapping_add(c ^ (b | !d)),
        };
        *lane = [d, t.rotate_left(S[round][j % 4]).wrapping_add(b), b, c];
    }
}

/// Steps `N` states over one 64-byte chunk.
#[inline(always)]
fn compress<const N: usize>(states: &mut [[u32; 4]; N], chunk: &[u8]) {
    let mut m = [0u32; 16];
    for (w, b) in m.iter_mut().zip(chunk.chunks_exact(4)) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    let mut v = *states;
    // Written out: left as loops, the compiler keeps a loop and reads the rotations from memory.
    macro_rules! steps {
        ($($i:literal)*) => { $(step::<$i, N>(&mut v, &m);)* };
    }
    steps!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
           32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
    for (s, v) in states.iter_mut().zip(v) {
        for (x, y) in s.iter_mut().zip(v) {
            *x = x.wrapping_add(y);
        }
    }
}

/// A streaming MD5.
pub struct Md5 {
    state: [u32; 4],
    len: u64,
    /// Bytes short of a whole chunk.
    tail: [u8; 64],
}

impl Default for Md5 {
    fn default() -> Self {
        Md5 {
            state: INIT,
            len: 0,
            tail: [0; 64],
        }
    }
}

impl Md5 {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, mut data: &[u8]) {
        let held = (self.len % 64) as usize;
        self.len += data.len() as u64;
        if held > 0 {
            let n = data.len().min(64 - held);
            self.tail[held..held + n].copy_from_slice(&data[..n]);
            data = &data[n..];
            if held + n < 64 {
                return;
            }
            let chunk = self.tail;
            blocks(&mut self.state, &chunk);
        }
        let whole = data.len() / 64 * 64;
        blocks(&mut self.state, &data[..whole]);
        self.tail[..data.len() - whole].copy_from_slice(&data[whole..]);
    }

    /// Adds `block` and returns the block's own MD5, both from one pass when this digest stands
    /// at a chunk boundary (every block of an upload but a short last one leaves it there).
    pub fn update_block(&mut self, block: &[u8]) -> [u8; 16] {
        if !self.len.is_multiple_of(64) {
            self.update(block);
            return digest(block);
        }
        let whole = block.len() / 64 * 64;
        let mut pair = [self.state, INIT];
        for chunk in block[..whole].chunks_exact(64) {
            compress::<2>(&mut pair, chunk);
        }
        let [object, own] = pair;
        self.state = object;
        let mut own = Md5 {
            state: own,
            len: whole as u64,
            tail: [0; 64],
        };
        self.len += whole as u64;
        self.update(&block[whole..]);
        own.update(&block[whole..]);
        own.finalize()
    }

    pub fn finalize(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let held = (self.len % 64) as usize;
        let pad = if held < 56 { 56 - held } else { 120 - held };
        let mut padding = [0u8; 72];
        padding[0] = 0x80;
        padding[pad..pad + 8].copy_from_slice(&bits.to_le_bytes());
        self.update(&padding[..pad + 8]);
        let mut out = [0u8; 16];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Steps one state over every whole chunk of `data`.
fn blocks(state: &mut [u32; 4], data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    x86_64::blocks(state, data);
    #[cfg(not(target_arch = "x86_64"))]
    for chunk in data.chunks_exact(64) {
        compress::<1>(std::array::from_mut(state), chunk);
    }
}

pub fn digest(data: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(data);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc_1321_test_suite() {
        let suite: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (text, want) in suite {
            assert_eq!(hex(digest(text.as_bytes())), want, "{text:?}");
        }
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    #[test]
    fn any_split_gives_the_reference_digest() {
        // Lengths around the padding's edges (55, 56, 64) and splits that leave a partial chunk.
        for n in [
            0,
            1,
            55,
            56,
            57,
            63,
            64,
            65,
            119,
            120,
            127,
            128,
            1000,
            4096 + 17,
        ] {
            let data = bytes(n, n as u32);
            let want: [u8; 16] = <::md5::Md5 as ::md5::Digest>::digest(&data).into();
            for split in [0, 1, 13, 64, n / 2, n] {
                let split = split.min(n);
                let mut h = Md5::new();
                h.update(&data[..split]);
                h.update(&data[split..]);
                assert_eq!(h.finalize(), want, "{n} bytes split at {split}");
            }
        }
    }

    #[test]
    fn pieces_of_every_size_give_the_reference_digest() {
        let data = bytes(20_000, 3);
        let want: [u8; 16] = <::md5::Md5 as ::md5::Digest>::digest(&data).into();
        for seed in 0..20u64 {
            let mut h = Md5::new();
            let (mut at, mut x) = (0, seed);
            while at < data.len() {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let n = ((x >> 33) % 200) as usize;
                let end = (at + n).min(data.len());
                h.update(&data[at..end]);
                at = end;
            }
            assert_eq!(h.finalize(), want, "seed {seed}");
        }
    }

    #[test]
    fn long_runs_of_chunks_in_one_call_give_the_reference_digest() {
        // The block function's loop over many chunks at once, at every tail length.
        for n in [(1 << 20) + 63, 1 << 20, 64 * 1000 + 1] {
            let data = bytes(n, 11);
            let want: [u8; 16] = <::md5::Md5 as ::md5::Digest>::digest(&data).into();
            assert_eq!(digest(&data), want, "{n} bytes");
        }
    }

    #[test]
    fn blocks_give_their_own_digest_and_the_whole_ones() {
        // Aligned blocks take the two-lane pass; after a short block the object's digest is off
        // the chunk boundary and the two are taken apart.
        for sizes in [
            &[64, 128, 640][..],
            &[4096, 4096, 100],
            &[100, 4096, 64],
            &[0, 7, 64],
            &[65536; 3],
        ] {
            let data = bytes(sizes.iter().sum(), 7);
            let mut whole = Md5::new();
            let mut at = 0;
            for &n in sizes {
                let block = &data[at..at + n];
                let want: [u8; 16] = <::md5::Md5 as ::md5::Digest>::digest(block).into();
                assert_eq!(whole.update_block(block), want, "block of {n} in {sizes:?}");
                at += n;
            }
            let want: [u8; 16] = <::md5::Md5 as ::md5::Digest>::digest(&data).into();
            assert_eq!(whole.finalize(), want, "whole of {sizes:?}");
        }
    }
}
