//! Entry storage with stable u32 indexes.
//!
//! Fixed-size chunks instead of one `Vec`: a doubling `Vec` can sit at
//! twice the memory it needs right after it grows (that alone would be
//! ~176 bytes per entry at 1M+1 entries), a chunked slab wastes at most
//! one chunk.

use crate::entry::Entry;

const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

#[derive(Default)]
pub(crate) struct Slab {
    chunks: Vec<Box<[Option<Entry>]>>,
    /// Slots ever handed out; those below it are live or in `free`.
    high: u32,
    free: Vec<u32>,
}

impl Slab {
    fn split(i: u32) -> (usize, usize) {
        ((i >> CHUNK_BITS) as usize, i as usize & (CHUNK - 1))
    }

    pub(crate) fn get(&self, i: u32) -> Option<&Entry> {
        let (c, o) = Self::split(i);
        self.chunks.get(c)?[o].as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut Entry> {
        let (c, o) = Self::split(i);
        self.chunks.get_mut(c)?[o].as_mut()
    }

    /// `None` once all 2^32 indexes are in use.
    pub(crate) fn insert(&mut self, e: Entry) -> Option<u32> {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.high;
                self.high = self.high.checked_add(1)?;
                if Self::split(i).0 == self.chunks.len() {
                    self.chunks.push((0..CHUNK).map(|_| None).collect());
                }
                i
            }
        };
        let (c, o) = Self::split(i);
        self.chunks[c][o] = Some(e);
        Some(i)
    }

    pub(crate) fn take(&mut self, i: u32) -> Option<Entry> {
        let (c, o) = Self::split(i);
        let e = self.chunks.get_mut(c)?[o].take()?;
        self.free.push(i);
        Some(e)
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.chunks.iter_mut().flat_map(|c| c.iter_mut()).flatten()
    }

    /// Drop all storage (call when empty).
    pub(crate) fn clear(&mut self) {
        *self = Slab::default();
    }

    #[cfg(test)]
    pub(crate) fn high_water(&self) -> u32 {
        self.high
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_take_reuse_across_chunks() {
        let mut s = Slab::default();
        let n = CHUNK as u32 + 5;
        for i in 0..n {
            let e = Entry {
                local_qpn: i,
                ..Entry::default()
            };
            assert_eq!(s.insert(e), Some(i));
        }
        assert_eq!(s.chunks.len(), 2);
        assert_eq!(s.get(CHUNK as u32 + 1).unwrap().local_qpn, CHUNK as u32 + 1);
        assert!(s.get(n).is_none());
        assert!(s.get(u32::MAX).is_none());
        assert_eq!(s.take(3).unwrap().local_qpn, 3);
        assert!(s.take(3).is_none());
        assert!(s.get(3).is_none());
        assert_eq!(s.insert(Entry::default()), Some(3));
        assert_eq!(s.high_water(), n);
        s.get_mut(7).unwrap().local_qpn = u32::MAX;
        assert_eq!(s.iter_mut().filter(|e| e.local_qpn == u32::MAX).count(), 1);
        assert_eq!(s.iter_mut().count(), n as usize);
        s.clear();
        assert_eq!((s.chunks.len(), s.high_water()), (0, 0));
    }
}
