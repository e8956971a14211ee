//! `words!`: an enum whose values users read as words (in `--json` and in tables). Each variant
//! is written with its word; the enum serializes as that word and `as_str`/`Display` give it,
//! so a report holds a type and its renderers match on variants, never on strings.

/// `words! { /// doc
/// pub enum Name { /// doc
///     Variant => "word", … } }`
#[macro_export]
macro_rules! words {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident => $word:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                // `pad`, not `write_str`: a table's `{:<10}` pads a word as it pads a `&str`.
                f.pad(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::words! {
        /// A test's words.
        enum Said {
            /// The first.
            Yes => "yes",
            No => "not_at_all",
        }
    }

    #[test]
    fn a_word_is_its_json_its_display_and_its_str() {
        assert_eq!(serde_json::to_string(&Said::No).unwrap(), "\"not_at_all\"");
        assert_eq!(Said::Yes.to_string(), "yes");
        assert_eq!(Said::No.as_str(), "not_at_all");
        assert_eq!(
            format!("[{:<5}]", Said::Yes),
            "[yes  ]",
            "padded like a str"
        );
    }
}
