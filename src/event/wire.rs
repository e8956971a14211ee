//! The journal's one form for bytes: a UUID and a digest are MessagePack `bin`, never an array
//! of integers (journal-format.md §6). `uuid` and `serde_bytes` would also take an array; these
//! take only what the writer writes, so that two readers from the spec agree on every payload.
//! Human-readable formats (JSON, for tests and tools) keep the types' own text forms.

use serde::de::{Deserializer, Error, Visitor};
use serde::Deserialize;
use uuid::Uuid;

/// A `bin` of exactly `N` bytes.
struct BinOf<const N: usize>;

impl<const N: usize> Visitor<'_> for BinOf<N> {
    type Value = [u8; N];

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a bin of {N} bytes")
    }

    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<[u8; N], E> {
        v.try_into().map_err(|_| E::invalid_length(v.len(), &self))
    }
}

/// `N` bytes as the journal writes them: a `bin` (an array of integers is refused).
pub(crate) fn bin<'de, D: Deserializer<'de>, const N: usize>(d: D) -> Result<[u8; N], D::Error> {
    d.deserialize_bytes(BinOf::<N>)
}

/// A UUID field of an event body.
pub fn uuid<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
    if d.is_human_readable() {
        Uuid::deserialize(d)
    } else {
        bin::<D, 16>(d).map(Uuid::from_bytes)
    }
}

/// An optional UUID field of an event body.
pub fn option_uuid<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
    #[derive(Deserialize)]
    struct Wire(#[serde(deserialize_with = "uuid")] Uuid);
    Option::<Wire>::deserialize(d).map(|o| o.map(|w| w.0))
}

/// The envelope's event id: a UUID as [`uuid`] reads it.
#[derive(Deserialize)]
pub(crate) struct EventId(#[serde(deserialize_with = "uuid")] pub(crate) Uuid);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Body {
        #[serde(deserialize_with = "uuid")]
        id: Uuid,
        #[serde(deserialize_with = "option_uuid")]
        other: Option<Uuid>,
    }

    #[test]
    fn a_uuid_is_a_bin_of_16_and_nothing_else() {
        let id = Uuid::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        let bin = |b: &[u8]| [&[0xc4, b.len() as u8][..], b].concat();
        let good = [&[0x92][..], &bin(id.as_bytes()), &bin(id.as_bytes())].concat();
        let body: Body = rmp_serde::from_slice(&good).unwrap();
        assert_eq!(
            body,
            Body {
                id,
                other: Some(id)
            }
        );
        let none = [&[0x92][..], &bin(id.as_bytes()), &[0xc0]].concat();
        assert_eq!(rmp_serde::from_slice::<Body>(&none).unwrap().other, None);

        let mut ints = vec![0xdc, 0x00, 0x10];
        ints.extend_from_slice(id.as_bytes());
        for bad in [
            [&[0x92][..], &ints, &[0xc0]].concat(),
            [&[0x92][..], &bin(id.as_bytes()), &ints].concat(),
            [&[0x92][..], &bin(&id.as_bytes()[..15]), &[0xc0]].concat(),
            [&[0x92, 0xb0][..], b"0123456789abcdef", &[0xc0]].concat(),
        ] {
            assert!(rmp_serde::from_slice::<Body>(&bad).is_err(), "{bad:02x?}");
        }
        let json = serde_json::json!({ "id": id.to_string(), "other": null });
        assert_eq!(serde_json::from_value::<Body>(json).unwrap().other, None);
    }
}
