//! The table's map from a connection's endpoints to its state. IPv4 pairs
//! (nearly every capture) get a map of their own with a key of two words,
//! which is cheaper to build, hash and compare than one wide enough for IPv6,
//! and a small direct-mapped cache in front of it (`front`).

use crate::wire::Endpoint;
use rustc_hash::FxHashMap;
use std::net::IpAddr;

/// Both IPv4 endpoints as `address << 16 | port`, lower end first.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Key4 {
    lo: u64,
    hi: u64,
}

/// Both endpoints as integers (an IPv4 address mapped into IPv6), lower end first.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Key6 {
    lo: u128,
    hi: u128,
    ports: u32,
}

/// A connection's key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    V4(Key4),
    V6(Key6),
}

/// One well-mixed word for the hasher: the inputs multiplied into 128 bits
/// and folded back, so that every input bit reaches the low bits the table
/// indexes by (the hasher alone only carries bits upward).
#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let m = u128::from(a ^ 0x243f_6a88_85a3_08d3) * u128::from(b ^ 0x1319_8a2e_0370_7344);
    (m as u64) ^ (m >> 64) as u64
}

impl std::hash::Hash for Key4 {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(mix(self.lo, self.hi));
    }
}

impl std::hash::Hash for Key6 {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let fold = |x: u128| (x as u64) ^ (x >> 64) as u64;
        h.write_u64(mix(fold(self.lo) ^ fold(self.hi).rotate_left(32), u64::from(self.ports)));
    }
}

#[inline]
fn addr_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)) | 0xffff_0000_0000,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The key of a segment from `a` to `b`, and whether `a` is its lower end.
#[inline]
pub(super) fn key(a: &Endpoint, b: &Endpoint) -> (Key, bool) {
    if let (IpAddr::V4(x), IpAddr::V4(y)) = (a.ip, b.ip) {
        let x = u64::from(u32::from(x)) << 16 | u64::from(a.port);
        let y = u64::from(u32::from(y)) << 16 | u64::from(b.port);
        return if x <= y { (Key::V4(Key4 { lo: x, hi: y }), true) } else { (Key::V4(Key4 { lo: y, hi: x }), false) };
    }
    let (x, y) = (addr_bits(a.ip), addr_bits(b.ip));
    if (x, a.port) <= (y, b.port) {
        (Key::V6(Key6 { lo: x, hi: y, ports: u32::from(a.port) << 16 | u32::from(b.port) }), true)
    } else {
        (Key::V6(Key6 { lo: y, hi: x, ports: u32::from(b.port) << 16 | u32::from(a.port) }), false)
    }
}

/// Connections by key. Boxed: the probe then walks small entries (key and
/// pointer), not connections of a kilobyte and more; and a connection stays
/// where it is while the map grows, which `front` relies on.
pub(super) struct Conns<C> {
    v4: FxHashMap<Key4, Box<C>>,
    /// Per slot of a key's hash: the IPv4 key looked up there last and the
    /// address of its connection (null: none). A hit costs a load and a
    /// compare of two words, where the map's probe (a group of tags, a mask,
    /// then the key) took a tenth of one thread's time (bench/RESULTS.md).
    /// A lookup or an insertion fills the key's slot, a removal clears it,
    /// and a walk over the map clears them all.
    front: Box<[(Key4, *mut C); FRONT]>,
    v6: FxHashMap<Key6, Box<C>>,
}

/// Slots of `front` (6 KiB): a few times the connections open at once in a
/// busy capture, so that few share one.
const FRONT: usize = 256;

#[inline(always)]
fn front_slot(k: &Key4) -> usize {
    (mix(k.lo, k.hi) >> 56) as usize % FRONT
}

impl<C> Default for Conns<C> {
    fn default() -> Self {
        let front = Box::new([(Key4 { lo: 0, hi: 0 }, std::ptr::null_mut()); FRONT]);
        Conns { v4: FxHashMap::default(), front, v6: FxHashMap::default() }
    }
}

impl<C> Conns<C> {
    #[inline]
    pub(super) fn get_mut(&mut self, k: &Key) -> Option<&mut C> {
        match k {
            Key::V4(k) => {
                let f = &mut self.front[front_slot(k)];
                if f.0 == *k && !f.1.is_null() {
                    // SAFETY: the address of the box that `v4` holds under `k`,
                    // taken from a unique borrow of it at the lookup that filled
                    // the slot; since then the box has not left the map nor been
                    // borrowed another way (those clear the slot), and a box's
                    // contents do not move when the map grows. `&mut self` makes
                    // this the only reference.
                    return Some(unsafe { &mut *f.1 });
                }
                // The slot and the reference returned are made from one
                // pointer, so that using either leaves the other valid.
                let p: *mut C = &mut **self.v4.get_mut(k)?;
                *f = (*k, p);
                // SAFETY: `p` is the box's address, just taken from a unique borrow.
                Some(unsafe { &mut *p })
            }
            Key::V6(k) => self.v6.get_mut(k).map(|c| &mut **c),
        }
    }

    pub(super) fn remove(&mut self, k: &Key) -> Option<Box<C>> {
        match k {
            Key::V4(k) => {
                let f = &mut self.front[front_slot(k)];
                if f.0 == *k {
                    f.1 = std::ptr::null_mut();
                }
                self.v4.remove(k)
            }
            Key::V6(k) => self.v6.remove(k),
        }
    }

    /// Inserts `c` under `k` (which holds none) and returns it.
    pub(super) fn insert(&mut self, k: Key, c: Box<C>) -> &mut C {
        match k {
            Key::V4(k) => {
                // The slot then holds this box, even if `k` held one (made
                // from one pointer with the reference returned, as in `get_mut`).
                let p: *mut C = &mut **self.v4.entry(k).insert_entry(c).into_mut();
                self.front[front_slot(&k)] = (k, p);
                // SAFETY: `p` is the box's address, just taken from a unique borrow.
                unsafe { &mut *p }
            }
            Key::V6(k) => self.v6.entry(k).insert_entry(c).into_mut(),
        }
    }

    fn forget_all(&mut self) {
        self.front.iter_mut().for_each(|f| f.1 = std::ptr::null_mut());
    }

    pub(super) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Every connection. Takes `&mut self` to clear `front`: the walk
    /// borrows every box another way.
    pub(super) fn iter(&mut self) -> impl Iterator<Item = (Key, &C)> {
        self.forget_all();
        let v4 = self.v4.iter().map(|(k, c)| (Key::V4(*k), &**c));
        v4.chain(self.v6.iter().map(|(k, c)| (Key::V6(*k), &**c)))
    }

    pub(super) fn drain(&mut self) -> impl Iterator<Item = Box<C>> {
        self.forget_all();
        self.v4.drain().map(|(_, c)| c).chain(self.v6.drain().map(|(_, c)| c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: [u8; 4], port: u16) -> Endpoint {
        Endpoint { ip: ip.into(), port }
    }

    /// Both directions of a connection have one key, each end's orientation
    /// its own; a different port, address or family is another key.
    #[test]
    fn one_key_per_connection_either_way() {
        let (a, b) = (ep([10, 0, 0, 2], 40000), ep([10, 0, 0, 1], 80));
        let (k, a_lo) = key(&a, &b);
        let (k2, b_lo) = key(&b, &a);
        assert!(k == k2 && a_lo != b_lo);
        // The same ports swapped between the addresses: another connection.
        assert!(key(&ep([10, 0, 0, 2], 80), &ep([10, 0, 0, 1], 40000)).0 != k);
        let mapped = Endpoint { ip: "::ffff:10.0.0.2".parse().unwrap(), port: 40000 };
        let b6 = Endpoint { ip: "::ffff:10.0.0.1".parse().unwrap(), port: 80 };
        let (k6, lo6) = key(&mapped, &b6);
        assert!(k6 != k && matches!(k6, Key::V6(_)), "IPv6 endpoints are not IPv4 ones");
        assert_eq!(lo6, a_lo, "the same order in either family");
        let mut m: Conns<u32> = Conns::default();
        m.insert(k, Box::new(1));
        m.insert(k6, Box::new(6));
        assert_eq!((m.get_mut(&k2).copied(), m.get_mut(&k6).copied(), m.len()), (Some(1), Some(6), 2));
        assert_eq!(m.remove(&k).as_deref(), Some(&1));
        assert_eq!(m.drain().map(|c| *c).collect::<Vec<_>>(), vec![6]);
    }

    /// The cache in front of the map never answers for a key that left, nor
    /// with another key's connection: many keys share each slot, and are
    /// looked up, removed, inserted again and walked in turn, against a
    /// plain map.
    #[test]
    fn the_front_cache_agrees_with_the_map() {
        let keys: Vec<Key> = (0..3 * FRONT as u32)
            .map(|i| key(&ep([10, 0, (i >> 8) as u8, i as u8], 40000 + (i % 7) as u16), &ep([10, 0, 0, 1], 80)).0)
            .collect();
        let mut m: Conns<u32> = Conns::default();
        let mut plain = std::collections::HashMap::new();
        let mut x = 0x2545_f491_u32;
        for round in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let i = x as usize % keys.len();
            let k = keys[i];
            match x >> 30 {
                0 => {
                    assert_eq!(m.remove(&k).map(|c| *c), plain.remove(&i), "remove {i}");
                }
                1 if !plain.contains_key(&i) => {
                    assert_eq!(*m.insert(k, Box::new(round)), round);
                    plain.insert(i, round);
                }
                2 if round % 100 == 0 => {
                    assert_eq!(m.iter().count(), plain.len());
                }
                _ => {
                    let got = m.get_mut(&k).map(|c| {
                        *c += 1;
                        *c
                    });
                    let want = plain.get_mut(&i).map(|c| {
                        *c += 1;
                        *c
                    });
                    assert_eq!(got, want, "lookup {i}");
                }
            }
        }
        assert_eq!(m.len(), plain.len());
        let mut left: Vec<u32> = m.drain().map(|c| *c).collect();
        let mut want: Vec<u32> = plain.into_values().collect();
        left.sort_unstable();
        want.sort_unstable();
        assert_eq!(left, want);
        assert!(m.get_mut(&keys[0]).is_none(), "nothing is found after the drain");
    }
}
