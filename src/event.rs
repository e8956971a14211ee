//! The event vocabulary and its envelope.
//!
//! Every fact dispatch knows is one of these events, framed in the journal. The frame header
//! carries `seq`, the numeric `kind` and `flags`; the MessagePack payload carries the rest of the
//! envelope and the event body (see `journal-format.md`, "Payload").
//!
//! Compatibility rule: an event's field list is frozen once released. A new field means a new
//! kind. A reader meets kinds it does not know as [`Event::Unknown`]; if the writer set
//! [`FLAG_MUST_UNDERSTAND`] the reducers refuse to go on (the journal was written by a newer
//! dispatch), otherwise the event is kept, dumped and skipped.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Frame flag: a reader that does not know this kind must not reduce state past it.
pub const FLAG_MUST_UNDERSTAND: u16 = 0x0001;

/// Microseconds since the Unix epoch, UTC. An integer, not RFC 3339 text: it costs ~10 ns to
/// decode instead of ~200 ns (machine-limits.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Micros(pub i64);

impl Micros {
    pub fn now() -> Micros {
        Micros(chrono::Utc::now().timestamp_micros())
    }

    pub fn from_secs(secs: i64) -> Micros {
        Micros(secs.saturating_mul(1_000_000))
    }

    pub fn secs(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    pub fn to_rfc3339(self) -> String {
        match chrono::DateTime::<chrono::Utc>::from_timestamp_micros(self.0) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            None => format!("@{}us", self.0),
        }
    }
}

/// Who wrote an event: enough to find the process and the person behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub user: String,
    pub host: String,
    pub pid: u32,
    pub command: Vec<String>,
}

impl Actor {
    /// The actor for this process. The command line is capped so that a huge argv cannot make
    /// every event of a command exceed the payload cap.
    pub fn current() -> Actor {
        const MAX_ARGS: usize = 64;
        const MAX_ARG_BYTES: usize = 256;
        let command = std::env::args()
            .take(MAX_ARGS)
            .map(|a| truncate_utf8(&a, MAX_ARG_BYTES).to_owned())
            .collect();
        Actor {
            user: current_user(),
            host: current_host(),
            pid: std::process::id(),
            command,
        }
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The effective user's name from the system's user database (NSS: files, LDAP, …), never from
/// `$USER`, which anyone can set. Falls back to the numeric uid.
pub fn current_user() -> String {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    user_name_of(uid).unwrap_or_else(|| uid.to_string())
}

fn user_name_of(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data; getpwuid_r writes only into `pwd` and `buf` (whose length
    // it is given) and sets `result` to null or to `&pwd`.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr(pwd.pw_name)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

pub fn current_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or fails.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".to_owned();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// An event as it stands in the journal.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    pub seq: u64,
    pub time: Micros,
    pub id: Uuid,
    pub actor: Actor,
    pub event: Event,
}

/// The first event of every journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Genesis {
    pub journal_id: Uuid,
    pub format_version: u16,
}

/// A SHA-256 digest: MessagePack `bin 8` of 32 bytes in the journal, lowercase hex in JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest(pub [u8; 32]);

impl std::fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", hex::encode(self.0))
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&hex::encode(self.0))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let bytes: Vec<u8> = if d.is_human_readable() {
            let text = String::deserialize(d)?;
            hex::decode(text).map_err(D::Error::custom)?
        } else {
            serde_bytes::ByteBuf::deserialize(d)?.into_vec()
        };
        let arr: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            D::Error::custom(format!("a SHA-256 digest has 32 bytes, not {}", b.len()))
        })?;
        Ok(Sha256Digest(arr))
    }
}

/// A torn tail was cut away. The bytes are kept in `saved_as`, beside the segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    pub segment: String,
    pub offset: u64,
    pub length: u64,
    pub sha256: Sha256Digest,
    pub saved_as: String,
    pub reason: String,
}

macro_rules! event_kinds {
    ($( $code:literal => $variant:ident($body:ty) $(, $must:ident)? ;)*) => {
        /// Every event kind this version knows, plus the ones it does not.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Event {
            $( $variant($body), )*
            /// A kind written by a newer dispatch. `payload` is the whole frame payload.
            Unknown { kind: u16, flags: u16, payload: Vec<u8> },
        }

        impl Event {
            /// The numeric kind stored in the frame header.
            pub fn kind(&self) -> u16 {
                match self {
                    $( Event::$variant(_) => $code, )*
                    Event::Unknown { kind, .. } => *kind,
                }
            }

            /// The kind's name, as `journal dump` prints it.
            pub fn kind_name(&self) -> &'static str {
                match self {
                    $( Event::$variant(_) => stringify!($variant), )*
                    Event::Unknown { .. } => "Unknown",
                }
            }

            /// Frame flags this event is written with.
            pub fn flags(&self) -> u16 {
                match self {
                    $( Event::$variant(_) => 0 $( | event_kinds!(@flag $must) )?, )*
                    Event::Unknown { flags, .. } => *flags,
                }
            }

            /// The body as JSON, for `journal dump --json`.
            pub fn body_json(&self) -> serde_json::Value {
                match self {
                    $( Event::$variant(body) => serde_json::to_value(body)
                        .unwrap_or(serde_json::Value::Null), )*
                    Event::Unknown { payload, .. } => serde_json::json!({
                        "payload_hex": hex::encode(payload),
                    }),
                }
            }
        }

        /// Encode the frame payload: `[time, id, actor, body]`.
        pub fn encode_payload(
            out: &mut Vec<u8>,
            time: Micros,
            id: &Uuid,
            actor: &Actor,
            event: &Event,
        ) -> Result<(), PayloadError> {
            match event {
                $( Event::$variant(body) => rmp_serde::encode::write(out, &(time, id, actor, body))?, )*
                Event::Unknown { payload, .. } => out.extend_from_slice(payload),
            }
            Ok(())
        }

        /// Decode a frame payload of the given kind and flags.
        pub fn decode_payload(
            seq: u64,
            kind: u16,
            flags: u16,
            payload: &[u8],
        ) -> Result<Envelope, PayloadError> {
            fn split<B: for<'de> Deserialize<'de>>(payload: &[u8]) -> Result<(Micros, Uuid, Actor, B), PayloadError> {
                Ok(rmp_serde::from_slice(payload)?)
            }
            let (time, id, actor, event) = match kind {
                $( $code => {
                    let (t, i, a, body) = split::<$body>(payload)?;
                    (t, i, a, Event::$variant(body))
                } )*
                _ => {
                    let (t, i, a, _) = split::<serde::de::IgnoredAny>(payload)?;
                    (t, i, a, Event::Unknown { kind, flags, payload: payload.to_vec() })
                }
            };
            Ok(Envelope { seq, time, id, actor, event })
        }

        /// Every known kind code with its name, for the spec and the tests.
        pub const KNOWN_KINDS: &[(u16, &str)] = &[ $( ($code, stringify!($variant)), )* ];
    };
    (@flag must_understand) => { FLAG_MUST_UNDERSTAND };
}

event_kinds! {
    1 => Genesis(Genesis), must_understand;
    2 => Recovered(Recovered);
    100 => PoolAttached(crate::state::pool::PoolAttached), must_understand;
    101 => PoolDetached(crate::state::pool::PoolDetached), must_understand;
    110 => WorkerSubmitIntent(crate::state::pool::WorkerSubmitIntent), must_understand;
    111 => WorkerLaunched(crate::state::pool::WorkerLaunched), must_understand;
    112 => WorkerLaunchFailed(crate::state::pool::WorkerLaunchFailed), must_understand;
    113 => WorkerStepObserved(crate::state::pool::WorkerStepObserved);
    114 => WorkerStopIntent(crate::state::pool::WorkerStopIntent);
    115 => WorkerExited(crate::state::pool::WorkerExited);
    116 => WorkerTerminal(crate::state::pool::WorkerTerminal), must_understand;
    120 => JobSubmitIntent(crate::state::jobs::JobSubmitIntent), must_understand;
    121 => JobSubmitted(crate::state::jobs::JobSubmitted), must_understand;
    122 => JobSubmitFailed(crate::state::jobs::JobSubmitFailed), must_understand;
    123 => JobTerminal(crate::state::jobs::JobTerminal), must_understand;
    130 => AssetAddIntent(crate::state::asset::AssetAddIntent), must_understand;
    131 => AssetAdded(crate::state::asset::AssetAdded), must_understand;
    132 => AssetAddFailed(crate::state::asset::AssetAddFailed), must_understand;
    133 => WorkerAssetsBound(crate::state::asset::WorkerAssetsBound), must_understand;
    134 => WorkerReportIngested(crate::state::pool::WorkerReportIngested);
    135 => WorkerJournalDamaged(crate::state::pool::WorkerJournalDamaged);
    150 => SupervisorStarted(crate::worker::events::SupervisorStarted);
    151 => PayloadStarted(crate::worker::events::PayloadStarted);
    152 => ShutdownSignalled(crate::worker::events::ShutdownSignalled);
    153 => PayloadExited(crate::worker::events::PayloadExited);
    154 => SupervisorPlan(crate::worker::events::SupervisorPlan);
    155 => ReceivingChecks(crate::worker::events::ReceivingChecks);
    156 => AssetChecked(crate::worker::events::AssetChecked);
    157 => CheckoutPrepared(crate::worker::events::CheckoutPrepared);
    158 => PreflightRefused(crate::worker::events::PreflightRefused);
    159 => WritersQuiesced(crate::worker::events::WritersQuiesced);
    160 => NativeStateHashed(crate::worker::events::NativeStateHashed);
    161 => AppendOnlyLogsChecked(crate::worker::events::AppendOnlyLogsChecked);
    162 => PublicationStarted(crate::worker::events::PublicationStarted);
    163 => Published(crate::worker::events::Published);
    164 => PublicationTimedOut(crate::worker::events::PublicationTimedOut);
    165 => PublicationFailed(crate::worker::events::PublicationFailed);
    166 => CleanupStarted(crate::worker::events::CleanupStarted);
    167 => CleanedUp(crate::worker::events::CleanedUp);
    168 => SupervisorFinished(crate::worker::events::SupervisorFinished);
    200 => SessionLaunchIntent(crate::state::session::SessionLaunchIntent), must_understand;
    201 => SessionJobSubmitted(crate::state::session::SessionJobSubmitted), must_understand;
    202 => SessionSubmitFailed(crate::state::session::SessionSubmitFailed), must_understand;
    203 => SessionNodeResolved(crate::state::session::SessionNodeResolved);
    204 => SessionAdopted(crate::state::session::SessionAdopted), must_understand;
    205 => SessionCancelIntent(crate::state::session::SessionCancelIntent);
    206 => SessionCancelFailed(crate::state::session::SessionCancelFailed);
    207 => SessionReleased(crate::state::session::SessionReleased), must_understand;
    208 => SessionDetached(crate::state::session::SessionDetached), must_understand;
    209 => SessionCleared(crate::state::session::SessionCleared), must_understand;
}

#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("payload does not encode: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("payload does not decode: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
}
