//! The machinery behind `spec.rs`: the `wire_structs!` and `messages!`
//! macros, the `Wire` trait they implement, and the layout descriptions the
//! C generator and the golden-file annotator read.
//!
//! Field kinds in a `wire_structs!` body (`name: KIND`):
//!
//! | kind                 | wire                                  | Rust        |
//! | -------------------- | ------------------------------------- | ----------- |
//! | `u8` .. `i32`, `T`   | little-endian integer / nested struct | same        |
//! | `INT in PATTERN`     | integer whose value must match        | same        |
//! | `bytes[N]`           | N opaque bytes                        | `[u8; N]`   |
//! | `str[N]`             | UTF-8, NUL-terminated, zero tail      | `String`    |
//! | `reserved[N]`        | N zero bytes                          | (absent)    |
//! | `len`                | u32 count of the array that names it  | (absent)    |
//! | `T[N; COUNT]`        | N slots of T, the first COUNT used    | `Vec<T>`    |
//! | `blob[N; COUNT]`     | N bytes, the first COUNT used         | `Vec<u8>`   |
//!
//! Decoding is canonical: anything `get` accepts, `put` writes back
//! byte for byte (reserved bytes, string tails and unused slots are zero).

use crate::ProtoError;

/// How a type or field sits on the wire.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Int {
        c_type: &'static str,
        size: usize,
    },
    Struct(&'static StructDesc),
    Bytes(usize),
    Str(usize),
    Reserved(usize),
    Len,
    Array {
        elem: &'static StructDesc,
        cap: usize,
        len: &'static str,
    },
    /// Opaque bytes, of which the `len` field names how many are used.
    Blob {
        cap: usize,
        len: &'static str,
    },
}

#[derive(Debug)]
pub struct StructDesc {
    pub name: &'static str,
    pub doc: &'static str,
    pub fields: &'static [FieldDesc],
}

#[derive(Debug)]
pub struct FieldDesc {
    pub name: &'static str,
    pub doc: &'static str,
    pub kind: Kind,
    /// The `in` pattern as written in spec.rs, e.g. `2..=4 | 8..=10`.
    pub allowed: Option<&'static str>,
}

impl Kind {
    pub const fn size(&self) -> usize {
        match self {
            Kind::Int { size, .. } => *size,
            Kind::Struct(d) => d.size(),
            Kind::Bytes(n) | Kind::Str(n) | Kind::Reserved(n) => *n,
            Kind::Len => 4,
            Kind::Array { elem, cap, .. } => elem.size() * *cap,
            Kind::Blob { cap, .. } => *cap,
        }
    }

    pub const fn align(&self) -> usize {
        match self {
            Kind::Int { size, .. } => *size,
            Kind::Struct(d) => d.align(),
            Kind::Bytes(_) | Kind::Str(_) | Kind::Reserved(_) => 1,
            Kind::Len => 4,
            Kind::Array { elem, .. } => elem.align(),
            Kind::Blob { .. } => 1,
        }
    }

    pub const fn struct_desc(&self) -> &'static StructDesc {
        match self {
            Kind::Struct(d) => d,
            _ => panic!("array elements must be wire structs"),
        }
    }
}

impl StructDesc {
    pub const fn size(&self) -> usize {
        let mut i = 0;
        let mut n = 0;
        while i < self.fields.len() {
            n += self.fields[i].kind.size();
            i += 1;
        }
        n
    }

    pub const fn align(&self) -> usize {
        let mut i = 0;
        let mut a = 1;
        while i < self.fields.len() {
            let f = self.fields[i].kind.align();
            if f > a {
                a = f;
            }
            i += 1;
        }
        a
    }

    /// True when a C compiler lays the struct out exactly as the wire does:
    /// every field at a multiple of its alignment and no tail padding.
    pub const fn naturally_packed(&self) -> bool {
        let mut i = 0;
        let mut off = 0;
        while i < self.fields.len() {
            let k = &self.fields[i].kind;
            if off % k.align() != 0 {
                return false;
            }
            off += k.size();
            i += 1;
        }
        off % self.align() == 0
    }
}

/// A fixed-size piece of a message.
pub trait Wire: Sized {
    const KIND: Kind;
    const SIZE: usize = Self::KIND.size();
    fn put(&self, w: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> Result<Self, ProtoError>;
}

macro_rules! wire_ints {
    ($($t:ident $c:literal),*) => {$(
        impl Wire for $t {
            const KIND: Kind = Kind::Int { c_type: $c, size: std::mem::size_of::<$t>() };
            fn put(&self, w: &mut Vec<u8>) {
                w.extend_from_slice(&self.to_le_bytes());
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, ProtoError> {
                Ok($t::from_le_bytes(r.array()?))
            }
        }
    )*};
}
wire_ints!(u8 "uint8_t", u16 "uint16_t", u32 "uint32_t", u64 "uint64_t", i32 "int32_t");

/// A cursor over received bytes; running short is an error, never a panic.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::TooShort {
                len: self.buf.len(),
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let s = self.take(N)?;
        <[u8; N]>::try_from(s).map_err(|_| ProtoError::TooShort { len: s.len() })
    }
}

pub fn get_reserved(r: &mut Reader<'_>, n: usize, what: &'static str) -> Result<(), ProtoError> {
    if r.take(n)?.iter().any(|&b| b != 0) {
        return Err(ProtoError::ReservedNotZero(what));
    }
    Ok(())
}

/// Writes at most `n - 1` bytes, stopping early at a NUL or where a cut
/// would split a character, then zero-fills: always decodable.
pub fn put_str(w: &mut Vec<u8>, s: &str, n: usize) {
    let s = s.split('\0').next().unwrap_or("");
    let mut end = s.len().min(n.saturating_sub(1));
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    w.extend_from_slice(&s.as_bytes()[..end]);
    w.resize(w.len() + (n - end), 0);
}

pub fn get_str(r: &mut Reader<'_>, n: usize, what: &'static str) -> Result<String, ProtoError> {
    let raw = r.take(n)?;
    let end = raw
        .iter()
        .position(|&b| b == 0)
        .ok_or(ProtoError::BadString(what))?;
    if raw[end..].iter().any(|&b| b != 0) {
        return Err(ProtoError::BadString(what));
    }
    String::from_utf8(raw[..end].to_vec()).map_err(|_| ProtoError::BadString(what))
}

/// Writes up to `cap` items, zero-fills the unused slots, and patches the
/// item count into the `len` field written earlier at offset `len_at`.
pub fn put_array<T: Wire>(w: &mut Vec<u8>, items: &[T], cap: usize, len_at: usize) {
    let used = items.len().min(cap);
    for it in &items[..used] {
        it.put(w);
    }
    w.resize(w.len() + (cap - used) * T::SIZE, 0);
    if let Some(slot) = w.get_mut(len_at..len_at + 4) {
        slot.copy_from_slice(&(used as u32).to_le_bytes());
    }
}

/// Writes up to `cap` bytes, zero-fills the rest, and patches the byte
/// count into the `len` field written earlier at offset `len_at`.
pub fn put_blob(w: &mut Vec<u8>, data: &[u8], cap: usize, len_at: usize) {
    let used = data.len().min(cap);
    w.extend_from_slice(&data[..used]);
    w.resize(w.len() + (cap - used), 0);
    if let Some(slot) = w.get_mut(len_at..len_at + 4) {
        slot.copy_from_slice(&(used as u32).to_le_bytes());
    }
}

pub fn get_blob(
    r: &mut Reader<'_>,
    cap: usize,
    count: u32,
    what: &'static str,
) -> Result<Vec<u8>, ProtoError> {
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count > cap {
        return Err(ProtoError::BadCount(what));
    }
    let data = r.take(count)?.to_vec();
    get_reserved(r, cap - count, what)?;
    Ok(data)
}

pub fn get_array<T: Wire>(
    r: &mut Reader<'_>,
    cap: usize,
    count: u32,
    what: &'static str,
) -> Result<Vec<T>, ProtoError> {
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count > cap {
        return Err(ProtoError::BadCount(what));
    }
    let items = (0..count)
        .map(|_| T::get(r))
        .collect::<Result<Vec<_>, _>>()?;
    get_reserved(r, (cap - count) * T::SIZE, what)?;
    Ok(items)
}

/// Defines wire structs: the Rust struct (without reserved and `len`
/// fields), its `Wire` impl, its layout description, and a compile-time
/// check that C lays it out without implicit padding.
macro_rules! wire_structs {
    ($( $(#[$($m:tt)*])* pub struct $name:ident { $($body:tt)* } )*) => {
        $( $crate::wire::wire_structs!(@munch [$(#[$($m)*])* $name] [] [$($body)*] [$($body)*]); )*
        /// Every wire struct, in definition order (dependencies first).
        pub const ALL_STRUCTS: &[&$crate::wire::StructDesc] =
            &[$( <$name as $crate::wire::Wire>::KIND.struct_desc() ),*];
    };

    // Sort the fields: reserved and `len` fields stay out of the Rust struct.
    (@munch $hd:tt $data:tt [] $all:tt) => {
        $crate::wire::wire_structs!(@emit $hd $data $all);
    };
    (@munch $hd:tt $data:tt
        [$(#[$fm:meta])* $f:ident : reserved [$n:literal] $(, $($rest:tt)*)?] $all:tt) => {
        $crate::wire::wire_structs!(@munch $hd $data [$($($rest)*)?] $all);
    };
    (@munch $hd:tt $data:tt [$(#[$fm:meta])* $f:ident : len $(, $($rest:tt)*)?] $all:tt) => {
        $crate::wire::wire_structs!(@munch $hd $data [$($($rest)*)?] $all);
    };
    (@munch $hd:tt [$($data:tt)*]
        [$(#[$fm:meta])* $f:ident : $k:tt $([$($n:tt)*])? $(in $p:pat)? $(, $($rest:tt)*)?]
        $all:tt) => {
        $crate::wire::wire_structs!(@munch $hd [$($data)* ($(#[$fm])* $f ($k $([$($n)*])?))]
            [$($($rest)*)?] $all);
    };

    (@emit [$(#[$($m:tt)*])* $name:ident] [$( ($(#[$fm:meta])* $f:ident $ty:tt) )*]
        [$( $(#[$($am:tt)*])* $af:ident : $ak:tt $([$($an:tt)*])? $(in $ap:pat)? ),* $(,)?]) => {
        $(#[$($m)*])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $crate::wire::wire_structs!(@ty $ty), )*
        }

        impl $crate::wire::Wire for $name {
            const KIND: $crate::wire::Kind = $crate::wire::Kind::Struct(&$crate::wire::StructDesc {
                name: stringify!($name),
                doc: concat!($($crate::wire::wire_doc!(#[$($m)*]), "\n",)*),
                fields: &[$( $crate::wire::FieldDesc {
                    name: stringify!($af),
                    doc: concat!($($crate::wire::wire_doc!(#[$($am)*]), "\n",)*),
                    kind: $crate::wire::wire_structs!(@kind $ak $([$($an)*])?),
                    allowed: $crate::wire::wire_structs!(@allowed $($ap)?),
                } ),*],
            });

            // Each field's local holds the offset it was written at; only
            // `len` fields' offsets are used, by their array.
            #[allow(unused_variables)]
            fn put(&self, w: &mut Vec<u8>) {
                $( let $af = w.len(); $crate::wire::wire_structs!(@put w, self, $af, $ak $([$($an)*])?); )*
            }

            #[allow(unused_variables, clippy::let_unit_value)]
            fn get(r: &mut $crate::wire::Reader<'_>) -> Result<Self, $crate::ProtoError> {
                $( let $af = $crate::wire::wire_structs!(@get r, concat!(stringify!($name), ".", stringify!($af)),
                    $ak $([$($an)*])? $(, $ap)?); )*
                Ok(Self { $($f),* })
            }
        }

        const _: () = assert!(
            <$name as $crate::wire::Wire>::KIND.struct_desc().naturally_packed(),
            concat!(stringify!($name), " needs explicit padding")
        );
    };

    (@ty (str [$n:literal])) => { String };
    (@ty (bytes [$n:literal])) => { [u8; $n] };
    (@ty (blob [$n:expr; $c:ident])) => { Vec<u8> };
    (@ty ($t:ident [$n:expr; $c:ident])) => { Vec<$t> };
    (@ty ($t:ident)) => { $t };

    (@kind str [$n:literal]) => { $crate::wire::Kind::Str($n) };
    (@kind bytes [$n:literal]) => { $crate::wire::Kind::Bytes($n) };
    (@kind reserved [$n:literal]) => { $crate::wire::Kind::Reserved($n) };
    (@kind len) => { $crate::wire::Kind::Len };
    (@kind blob [$n:expr; $c:ident]) => {
        $crate::wire::Kind::Blob { cap: $n, len: stringify!($c) }
    };
    (@kind $t:ident [$n:expr; $c:ident]) => {
        $crate::wire::Kind::Array {
            elem: <$t as $crate::wire::Wire>::KIND.struct_desc(),
            cap: $n,
            len: stringify!($c),
        }
    };
    (@kind $t:ident) => { <$t as $crate::wire::Wire>::KIND };

    (@allowed) => { None };
    (@allowed $p:pat) => { Some(stringify!($p)) };

    (@put $w:ident, $s:ident, $f:ident, str [$n:literal]) => { $crate::wire::put_str($w, &$s.$f, $n) };
    (@put $w:ident, $s:ident, $f:ident, bytes [$n:literal]) => { $w.extend_from_slice(&$s.$f) };
    (@put $w:ident, $s:ident, $f:ident, reserved [$n:literal]) => { $w.resize($w.len() + $n, 0) };
    (@put $w:ident, $s:ident, $f:ident, len) => { $w.extend_from_slice(&[0; 4]) };
    (@put $w:ident, $s:ident, $f:ident, blob [$n:expr; $c:ident]) => {
        $crate::wire::put_blob($w, &$s.$f, $n, $c)
    };
    (@put $w:ident, $s:ident, $f:ident, $t:ident [$n:expr; $c:ident]) => {
        $crate::wire::put_array($w, &$s.$f, $n, $c)
    };
    (@put $w:ident, $s:ident, $f:ident, $t:ident) => { $crate::wire::Wire::put(&$s.$f, $w) };

    (@get $r:ident, $what:expr, str [$n:literal]) => { $crate::wire::get_str($r, $n, $what)? };
    (@get $r:ident, $what:expr, bytes [$n:literal]) => { $r.array::<$n>()? };
    (@get $r:ident, $what:expr, reserved [$n:literal]) => {
        $crate::wire::get_reserved($r, $n, $what)?
    };
    (@get $r:ident, $what:expr, len) => { <u32 as $crate::wire::Wire>::get($r)? };
    (@get $r:ident, $what:expr, blob [$n:expr; $c:ident]) => {
        $crate::wire::get_blob($r, $n, $c, $what)?
    };
    (@get $r:ident, $what:expr, $t:ident [$n:expr; $c:ident]) => {
        $crate::wire::get_array::<$t>($r, $n, $c, $what)?
    };
    (@get $r:ident, $what:expr, $t:ident $(, $p:pat)?) => {{
        let v = <$t as $crate::wire::Wire>::get($r)?;
        $( if !matches!(v, $p) {
            return Err($crate::ProtoError::BadValue($what));
        } )?
        v
    }};
}

/// Defines the opcode table: the `RequestBody`, `ReplyBody`, `NoticeBody`
/// and `PeerBody` enums and the descriptions the C generator reads.
macro_rules! messages {
    (
        requests { $( $op:literal $v:ident ($($req:ident)?) => ($($rep:ident)?) ),* $(,)? }
        notices { $( $nop:literal $nv:ident ($nt:ident) ),* $(,)? }
        peers { $( $pop:literal $pv:ident ($pt:ident) ),* $(,)? }
    ) => {
        $crate::wire::messages!(@enum
            /// A request body; the variant is the opcode.
            RequestBody { $( $op $v ($($req)?) ),* });
        $crate::wire::messages!(@enum
            /// A successful reply's body; the variant is the request's opcode.
            ReplyBody { $( $op $v ($($rep)?) ),* });
        $crate::wire::messages!(@enum
            /// An asynchronous notice from the backend.
            NoticeBody { $( $nop $nv ($nt) ),* });
        $crate::wire::messages!(@enum
            /// A message from one masqd to another.
            PeerBody { $( $pop $pv ($pt) ),* });

        /// Every request opcode with its request and reply layouts.
        pub const MESSAGES: &[$crate::MessageDesc] = &[$( $crate::MessageDesc {
            name: stringify!($v),
            opcode: $op,
            request: $crate::wire::messages!(@desc $($req)?),
            reply: $crate::wire::messages!(@desc $($rep)?),
        } ),*];

        /// Every notice opcode with its layout.
        pub const NOTICES: &[$crate::MessageDesc] = &[$( $crate::MessageDesc {
            name: stringify!($nv),
            opcode: $nop,
            request: None,
            reply: Some(<$nt as $crate::wire::Wire>::KIND.struct_desc()),
        } ),*];

        /// Every masqd-to-masqd opcode with its layout (as a request: none
        /// has a reply).
        pub const PEER_MESSAGES: &[$crate::MessageDesc] = &[$( $crate::MessageDesc {
            name: stringify!($pv),
            opcode: $pop,
            request: Some(<$pt as $crate::wire::Wire>::KIND.struct_desc()),
            reply: None,
        } ),*];
    };

    (@enum $(#[$m:meta])* $e:ident { $( $op:literal $v:ident ($($t:ident)?) ),* }) => {
        $(#[$m])*
        // Bodies by value, whatever their sizes: a message lives for one
        // request, and boxing would allocate for every one.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $e {
            $( $v $(($t))? ),*
        }

        impl $e {
            pub fn opcode(&self) -> u16 {
                match self {
                    $( Self::$v { .. } => $op ),*
                }
            }

            /// The variant's name, as the opcode table spells it.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$v { .. } => stringify!($v) ),*
                }
            }

            /// The body size for `opcode`, or None if it is not one of ours.
            pub fn body_size(opcode: u16) -> Option<usize> {
                match opcode {
                    $( $op => Some(0 $(+ <$t as $crate::wire::Wire>::SIZE)?), )*
                    _ => None,
                }
            }

            #[allow(irrefutable_let_patterns)]
            pub(crate) fn put(&self, w: &mut Vec<u8>) {
                match self {
                    $( Self::$v { .. } => $crate::wire::messages!(@put w, self, $e, $v $(, $t)?) ),*
                }
            }

            pub(crate) fn get(opcode: u16, r: &mut $crate::wire::Reader<'_>) -> Result<Self, $crate::ProtoError> {
                match opcode {
                    $( $op => Ok($crate::wire::messages!(@get r, $e, $v $(, $t)?)), )*
                    _ => Err($crate::ProtoError::UnknownOpcode(opcode)),
                }
            }
        }
    };

    (@put $w:ident, $s:ident, $e:ident, $v:ident) => { () };
    (@put $w:ident, $s:ident, $e:ident, $v:ident, $t:ident) => {
        if let $e::$v(b) = $s {
            $crate::wire::Wire::put(b, $w)
        }
    };
    (@get $r:ident, $e:ident, $v:ident) => { $e::$v };
    (@get $r:ident, $e:ident, $v:ident, $t:ident) => {
        $e::$v(<$t as $crate::wire::Wire>::get($r)?)
    };
    (@desc) => { None };
    (@desc $t:ident) => { Some(<$t as $crate::wire::Wire>::KIND.struct_desc()) };
}

/// Defines protocol constants once, for Rust and for the C header.
macro_rules! constants {
    ($( $(#[$($m:tt)*])* $name:ident : $t:ty = $v:expr; )*) => {
        $( $(#[$($m)*])* pub const $name: $t = $v; )*
        /// (name, value, doc) of every constant, for the C generator.
        pub const CONSTANTS: &[(&str, u64, &str)] = &[$(
            (stringify!($name), $name as u64, concat!($($crate::wire::wire_doc!(#[$($m)*]), "\n",)*)),
        )*];
    };
}

macro_rules! wire_doc {
    (#[doc = $d:expr]) => {
        $d
    };
    (#[$($m:tt)*]) => {
        ""
    };
}

pub(crate) use {constants, messages, wire_doc, wire_structs};
