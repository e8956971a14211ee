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

pub mod asset;
pub mod host;
pub mod jobs;
pub mod overrides;
pub mod pool;
pub mod session;
pub mod trial;
pub mod watermark;
pub mod wire;
pub mod worker;

pub use host::{current_host, current_user, Actor, Micros};

/// Frame flag: a reader that does not know this kind must not reduce state past it.
pub const FLAG_MUST_UNDERSTAND: u16 = 0x0001;

/// An event as it stands in a journal: the coordinator's ([`Event`]) unless said otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope<E = Event> {
    pub seq: u64,
    pub time: Micros,
    pub id: Uuid,
    pub actor: Actor,
    pub event: E,
}

/// An event of a worker's own journal.
pub type WorkerEnvelope = Envelope<WorkerEvent>;

/// The first event of every journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Genesis {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
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
        if !d.is_human_readable() {
            return wire::bin::<D, 32>(d).map(Sha256Digest);
        }
        let bytes = hex::decode(String::deserialize(d)?).map_err(D::Error::custom)?;
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

/// The branches of a fork (journal-format.md §8.1) were merged: the `events` frames right after
/// this one are the frames of the fork's region, re-appended in the order they stood in the file,
/// each with its payload (time, id, actor, body) unchanged. The segment as it was is kept, whole,
/// in `saved_as`, beside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalMerged {
    pub segment: String,
    /// Where the region began, and its length and SHA-256 as it stood before the merge.
    pub offset: u64,
    pub length: u64,
    pub sha256: Sha256Digest,
    pub saved_as: String,
    /// The seq of the last frame every branch shared.
    pub common_seq: u64,
    pub branches: Vec<MergedBranch>,
    /// Frames re-appended after this event.
    pub events: u64,
    pub reason: String,
}

/// One branch of a merged fork, as it was written (its seqs before the merge).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedBranch {
    pub forked_after_seq: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
}

/// What a journal's reader and writer need of the events it holds: the kind codes, the flags and
/// the payload codec. Two vocabularies share the journal format: [`Event`], the coordinator's,
/// and [`WorkerEvent`], what a supervisor writes to the worker's own journal. Their kind codes are
/// disjoint but for `Genesis` (1), `Recovered` (2) and `JournalMerged` (3), which any journal can
/// hold; a kind of the
/// other vocabulary reads as `Unknown`, so the coordinator's reducer never meets a worker's event.
pub trait Vocabulary: Clone + std::fmt::Debug + PartialEq + Sized {
    /// Every kind code this vocabulary knows, with its name, in code order.
    const KINDS: &'static [(u16, &'static str)];

    /// The numeric kind stored in the frame header.
    fn kind(&self) -> u16;
    /// Frame flags this event is written with.
    fn flags(&self) -> u16;
    /// The kind's name, as `journal dump` prints it.
    fn kind_name(&self) -> &'static str;
    /// The body as JSON, for `journal dump --json`.
    fn body_json(&self) -> serde_json::Value;
    /// The body after the envelope fields: `[time, id, actor, body]`.
    fn encode_into(
        &self,
        out: &mut Vec<u8>,
        time: Micros,
        id: &Uuid,
        actor: &Actor,
    ) -> Result<(), PayloadError>;
    /// A whole payload of the given kind and flags.
    fn decode_from(
        seq: u64,
        kind: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Envelope<Self>, PayloadError>;
    /// The body of a known kind from the bytes where it starts, as [`Vocabulary::decode_from`]
    /// would decode that element; `None` for an unknown kind or any error.
    fn decode_known_body(kind: u16, bytes: &[u8]) -> Option<Self>;
    /// The journal's first event.
    fn genesis(g: Genesis) -> Self;
    /// The writer's record of a torn tail it cut.
    fn recovered(r: Recovered) -> Self;
    /// The record of a fork's branches merged, written before them.
    fn merged(m: JournalMerged) -> Self;
}

macro_rules! vocabulary {
    ($(#[$doc:meta])* $name:ident { $( $code:literal => $variant:ident($body:ty) $(, $must:ident)? ;)* }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $name {
            $( $variant($body), )*
            /// A kind written by a newer dispatch. `payload` is the whole frame payload.
            Unknown { kind: u16, flags: u16, payload: Vec<u8> },
        }

        impl $name {
            /// The numeric kind stored in the frame header.
            pub fn kind(&self) -> u16 {
                match self {
                    $( $name::$variant(_) => $code, )*
                    $name::Unknown { kind, .. } => *kind,
                }
            }

            /// The kind's name, as `journal dump` prints it.
            pub fn kind_name(&self) -> &'static str {
                match self {
                    $( $name::$variant(_) => stringify!($variant), )*
                    $name::Unknown { .. } => "Unknown",
                }
            }

            /// Frame flags this event is written with.
            pub fn flags(&self) -> u16 {
                match self {
                    $( $name::$variant(_) => 0 $( | vocabulary!(@flag $must) )?, )*
                    $name::Unknown { flags, .. } => *flags,
                }
            }

            /// The body as JSON, for `journal dump --json`.
            pub fn body_json(&self) -> serde_json::Value {
                match self {
                    $( $name::$variant(body) => serde_json::to_value(body)
                        .unwrap_or(serde_json::Value::Null), )*
                    $name::Unknown { payload, .. } => serde_json::json!({
                        "payload_hex": hex::encode(payload),
                    }),
                }
            }
        }

        impl Vocabulary for $name {
            const KINDS: &'static [(u16, &'static str)] = &[ $( ($code, stringify!($variant)), )* ];

            fn kind(&self) -> u16 {
                $name::kind(self)
            }

            fn flags(&self) -> u16 {
                $name::flags(self)
            }

            fn kind_name(&self) -> &'static str {
                $name::kind_name(self)
            }

            fn body_json(&self) -> serde_json::Value {
                $name::body_json(self)
            }

            fn encode_into(
                &self,
                out: &mut Vec<u8>,
                time: Micros,
                id: &Uuid,
                actor: &Actor,
            ) -> Result<(), PayloadError> {
                match self {
                    $( $name::$variant(body) => rmp_serde::encode::write(out, &(time, id, actor, body))?, )*
                    $name::Unknown { payload, .. } => out.extend_from_slice(payload),
                }
                Ok(())
            }

            fn decode_from(
                seq: u64,
                kind: u16,
                flags: u16,
                payload: &[u8],
            ) -> Result<Envelope<Self>, PayloadError> {
                let (time, id, actor, event) = match kind {
                    $( $code => {
                        let (t, i, a, body) = split::<$body>(payload)?;
                        (t, i, a, $name::$variant(body))
                    } )*
                    _ => {
                        check_foreign_body(seq, kind, flags, payload)?;
                        let (t, i, a, _) = split::<serde::de::IgnoredAny>(payload)?;
                        (t, i, a, $name::Unknown { kind, flags, payload: payload.to_vec() })
                    }
                };
                Ok(Envelope { seq, time, id, actor, event })
            }

            fn decode_known_body(kind: u16, bytes: &[u8]) -> Option<Self> {
                match kind {
                    $( $code => element::<$body>(bytes).map($name::$variant), )*
                    _ => None,
                }
            }

            fn genesis(g: Genesis) -> Self {
                $name::Genesis(g)
            }

            fn recovered(r: Recovered) -> Self {
                $name::Recovered(r)
            }

            fn merged(m: JournalMerged) -> Self {
                $name::JournalMerged(m)
            }
        }
    };
    (@flag must_understand) => { FLAG_MUST_UNDERSTAND };
}

/// A kind the reading vocabulary does not know but the other one does is decoded by that one
/// too, so that a bad body is damage whichever vocabulary reads the journal: `verify`, `dump`,
/// `audit` and every load agree (journal-format.md §8).
fn check_foreign_body(seq: u64, kind: u16, flags: u16, payload: &[u8]) -> Result<(), PayloadError> {
    let knows = |kinds: &[(u16, &str)]| kinds.iter().any(|(k, _)| *k == kind);
    match (knows(Event::KINDS), knows(WorkerEvent::KINDS)) {
        (false, true) => WorkerEvent::decode_from(seq, kind, flags, payload).map(drop),
        (true, false) => Event::decode_from(seq, kind, flags, payload).map(drop),
        _ => Ok(()),
    }
}

/// The name of a kind code in whichever vocabulary knows it.
pub fn kind_name_of(kind: u16) -> Option<&'static str> {
    KNOWN_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, name)| *name)
}

fn split<B: for<'de> Deserialize<'de>>(
    payload: &[u8],
) -> Result<(Micros, Uuid, Actor, B), PayloadError> {
    let (time, id, actor, body): (Micros, wire::EventId, Actor, B) =
        rmp_serde::from_slice(payload)?;
    Ok((time, id.0, actor, body))
}

/// Encode the frame payload: `[time, id, actor, body]`.
pub fn encode_payload<E: Vocabulary>(
    out: &mut Vec<u8>,
    time: Micros,
    id: &Uuid,
    actor: &Actor,
    event: &E,
) -> Result<(), PayloadError> {
    event.encode_into(out, time, id, actor)
}

/// Decode a frame payload of the coordinator's journal of the given kind and flags.
pub fn decode_payload(
    seq: u64,
    kind: u16,
    flags: u16,
    payload: &[u8],
) -> Result<Envelope, PayloadError> {
    Event::decode_from(seq, kind, flags, payload)
}

/// Decode a frame payload of a journal of vocabulary `E`.
pub fn decode_payload_of<E: Vocabulary>(
    seq: u64,
    kind: u16,
    flags: u16,
    payload: &[u8],
) -> Result<Envelope<E>, PayloadError> {
    E::decode_from(seq, kind, flags, payload)
}

/// Whether a payload decodes as its kind's body in whichever vocabulary knows the kind (as an
/// envelope around any one value when none does): the classifier's check, which holds for every
/// journal alike (journal-format.md §6).
pub fn check_payload(seq: u64, kind: u16, flags: u16, payload: &[u8]) -> Result<(), PayloadError> {
    if WorkerEvent::KINDS.iter().any(|(k, _)| *k == kind) {
        WorkerEvent::decode_from(seq, kind, flags, payload).map(drop)
    } else {
        Event::decode_from(seq, kind, flags, payload).map(drop)
    }
}

/// Every known kind code of both vocabularies with its name, in code order: the kind table of
/// journal-format.md, for the spec and the tests.
pub const KNOWN_KINDS: &[(u16, &str)] =
    &merge_kinds::<KNOWN_KIND_COUNT>(Event::KINDS, WorkerEvent::KINDS);

/// `Genesis`, `Recovered` and `JournalMerged` are in both vocabularies.
const SHARED_KINDS: usize = 3;
const KNOWN_KIND_COUNT: usize = Event::KINDS.len() + WorkerEvent::KINDS.len() - SHARED_KINDS;

/// The union of two kind lists in code order, a code both hold once.
const fn merge_kinds<const N: usize>(
    a: &[(u16, &'static str)],
    b: &[(u16, &'static str)],
) -> [(u16, &'static str); N] {
    let mut out = [(0u16, ""); N];
    let (mut i, mut j, mut k) = (0, 0, 0);
    while i < a.len() || j < b.len() {
        let take_a = j == b.len() || (i < a.len() && a[i].0 <= b[j].0);
        let next = if take_a { a[i] } else { b[j] };
        if take_a {
            if j < b.len() && b[j].0 == a[i].0 {
                j += 1;
            }
            i += 1;
        } else {
            j += 1;
        }
        out[k] = next;
        k += 1;
    }
    assert!(k == N, "the kind count is the union's");
    out
}

vocabulary! {
    /// Every event kind of the coordinator's journal, plus the ones this version does not know.
    Event {
        1 => Genesis(Genesis), must_understand;
        2 => Recovered(Recovered);
        3 => JournalMerged(JournalMerged);
        100 => PoolAttached(pool::PoolAttached), must_understand;
        101 => PoolDetached(pool::PoolDetached), must_understand;
        102 => PoolCreateIntent(pool::PoolCreateIntent), must_understand;
        103 => PoolCreateJob(pool::PoolCreateJob), must_understand;
        104 => PoolCreateFailed(pool::PoolCreateFailed), must_understand;
        105 => PoolOwned(pool::PoolOwned), must_understand;
        106 => PoolReleaseIntent(pool::PoolReleaseIntent), must_understand;
        107 => PoolReleased(pool::PoolReleased), must_understand;
        108 => AllocationMarkIntent(pool::AllocationMarkIntent);
        109 => AllocationMarked(pool::AllocationMarked);
        110 => WorkerSubmitIntent(pool::WorkerSubmitIntent), must_understand;
        111 => WorkerLaunched(pool::WorkerLaunched), must_understand;
        112 => WorkerLaunchFailed(pool::WorkerLaunchFailed), must_understand;
        113 => WorkerStepObserved(pool::WorkerStepObserved);
        114 => WorkerStopIntent(pool::WorkerStopIntent);
        115 => WorkerExited(pool::WorkerExited);
        116 => WorkerTerminal(pool::WorkerTerminal), must_understand;
        117 => WorkerPlaced(pool::WorkerPlaced), must_understand;
        118 => PoolNodes(pool::PoolNodes), must_understand;
        119 => PoolCreateShape(pool::PoolCreateShape);
        120 => JobSubmitIntent(jobs::JobSubmitIntent), must_understand;
        121 => JobSubmitted(jobs::JobSubmitted), must_understand;
        122 => JobSubmitFailed(jobs::JobSubmitFailed), must_understand;
        123 => JobTerminal(jobs::JobTerminal), must_understand;
        124 => JobStopIntent(jobs::JobStopIntent);
        125 => JobNamed(jobs::JobNamed), must_understand;
        130 => AssetAddIntent(asset::AssetAddIntent), must_understand;
        131 => AssetAdded(asset::AssetAdded), must_understand;
        132 => AssetAddFailed(asset::AssetAddFailed), must_understand;
        133 => WorkerAssetsBound(asset::WorkerAssetsBound), must_understand;
        134 => WorkerReportIngested(pool::WorkerReportIngested);
        135 => WorkerJournalDamaged(pool::WorkerJournalDamaged);
        136 => PoolAllocationEnded(pool::PoolAllocationEnded);
        137 => WorkerCleanupIntent(pool::WorkerCleanupIntent);
        138 => WorkerCleanedUp(pool::WorkerCleanedUp);
        139 => PoolNodeLost(pool::PoolNodeLost);
        140 => TrialOpened(trial::TrialOpened), must_understand;
        141 => TrialWorkerJoined(trial::TrialWorkerJoined), must_understand;
        142 => TrialJudged(trial::TrialJudged), must_understand;
        143 => WorkerDevicesIngested(pool::WorkerDevicesIngested);
        144 => JobRequeued(jobs::JobRequeued);
        170 => WorkerForgotten(overrides::WorkerForgotten), must_understand;
        171 => SessionForgotten(overrides::SessionForgotten), must_understand;
        172 => AllocationStolen(overrides::AllocationStolen);
        173 => PoolRenewalAsked(pool::PoolRenewalAsked);
        174 => PoolRenewalIntent(pool::PoolRenewalIntent), must_understand;
        175 => PoolRenewalJob(pool::PoolRenewalJob), must_understand;
        176 => PoolRenewalFailed(pool::PoolRenewalFailed), must_understand;
        177 => PoolRenewed(pool::PoolRenewed), must_understand;
        178 => PoolRenewalStopped(pool::PoolRenewalStopped);
        180 => WatermarkIntent(watermark::WatermarkIntent);
        181 => WatermarkMade(watermark::WatermarkMade), must_understand;
        182 => WatermarkFailed(watermark::WatermarkFailed);
        183 => WatermarkCancelled(watermark::WatermarkCancelled);
        184 => PoolAllocationEndIntent(pool::PoolAllocationEndIntent), must_understand;
        185 => PoolAllocationEndAnswered(pool::PoolAllocationEndAnswered);
        190 => WorkerRequest(pool::WorkerRequest);
        191 => WorkerResubmitted(pool::WorkerResubmitted);
        192 => WorkerResubmitRefused(pool::WorkerResubmitRefused);
        193 => WorkerContinued(pool::WorkerContinued);
        194 => ContinuationRefused(pool::ContinuationRefused);
        195 => ContinuationAsked(pool::ContinuationAsked);
        196 => JobRequest(jobs::JobRequest);
        200 => SessionLaunchIntent(session::SessionLaunchIntent), must_understand;
        201 => SessionJobSubmitted(session::SessionJobSubmitted), must_understand;
        202 => SessionSubmitFailed(session::SessionSubmitFailed), must_understand;
        203 => SessionNodeResolved(session::SessionNodeResolved);
        204 => SessionAdopted(session::SessionAdopted), must_understand;
        205 => SessionCancelIntent(session::SessionCancelIntent);
        206 => SessionCancelFailed(session::SessionCancelFailed);
        207 => SessionReleased(session::SessionReleased), must_understand;
        208 => SessionDetached(session::SessionDetached), must_understand;
        209 => SessionCleared(session::SessionCleared), must_understand;
        210 => SessionHoldDecided(session::SessionHoldDecided);
        211 => SessionHoldSettled(session::SessionHoldSettled);
    }
}

vocabulary! {
    /// Every event kind of a worker's own journal (kinds 150–169 and 220–224, beside `Genesis` and
    /// `Recovered`), written by its supervisor on the node and read by the coordinator as evidence.
    WorkerEvent {
        1 => Genesis(Genesis), must_understand;
        2 => Recovered(Recovered);
        3 => JournalMerged(JournalMerged);
        150 => SupervisorStarted(worker::SupervisorStarted);
        151 => PayloadStarted(worker::PayloadStarted);
        152 => ShutdownSignalled(worker::ShutdownSignalled);
        153 => PayloadExited(worker::PayloadExited);
        154 => SupervisorPlan(worker::SupervisorPlan);
        155 => ReceivingChecks(worker::ReceivingChecks);
        156 => AssetChecked(worker::AssetChecked);
        157 => CheckoutPrepared(worker::CheckoutPrepared);
        158 => PreflightRefused(worker::PreflightRefused);
        159 => WritersQuiesced(worker::WritersQuiesced);
        160 => NativeStateHashed(worker::NativeStateHashed);
        161 => AppendOnlyLogsChecked(worker::AppendOnlyLogsChecked);
        162 => PublicationStarted(worker::PublicationStarted);
        163 => Published(worker::Published);
        164 => PublicationTimedOut(worker::PublicationTimedOut);
        165 => PublicationFailed(worker::PublicationFailed);
        166 => CleanupStarted(worker::CleanupStarted);
        167 => CleanedUp(worker::CleanedUp);
        168 => SupervisorFinished(worker::SupervisorFinished);
        169 => StepDevices(worker::StepDevices);
        220 => CheckpointDeclared(worker::CheckpointDeclared);
        221 => ResumedFrom(worker::ResumedFrom);
        222 => CheckpointPublishing(worker::CheckpointPublishing);
        223 => CheckpointPublished(worker::CheckpointPublished);
        224 => CheckpointUnpublished(worker::CheckpointUnpublished);
    }
}

/// A body's MessagePack bytes as journal-format.md writes its examples: lowercase hex,
/// space-separated. For the tests that check those examples.
#[cfg(test)]
pub(crate) fn body_hex<T: Serialize>(body: &T) -> String {
    rmp_serde::to_vec(body)
        .expect("a body always encodes")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Nesting depth left to an element of the payload array: [`decode_payload`] starts at
/// rmp-serde's 1024 and spends one level on the array itself.
const ELEMENT_DEPTH: usize = 1023;

/// One element of the payload array, decoded from the bytes where it starts. Bytes after it are
/// ignored, as `rmp_serde::from_slice` ignores bytes after the array.
fn element<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(ELEMENT_DEPTH);
    T::deserialize(&mut de).ok()
}

/// Length of a MessagePack integer from its marker byte, if `b` starts one.
fn int_len(b: &[u8]) -> Option<usize> {
    let len = match *b.first()? {
        0x00..=0x7f | 0xe0..=0xff => 1,
        0xcc | 0xd0 => 2,
        0xcd | 0xd1 => 3,
        0xce | 0xd2 => 5,
        0xcf | 0xd3 => 9,
        _ => return None,
    };
    (b.len() >= len).then_some(len)
}

/// Decodes payloads to exactly what [`decode_payload`] returns, faster on a journal.
///
/// Consecutive events mostly come from one process, so their actors (a quarter to a half of
/// each payload, and most of its allocations) are byte-for-byte the same. This decoder keeps
/// the last actor's bytes and value; when the next payload holds the same bytes in the actor
/// position, the value is reused instead of decoded. MessagePack is prefix-free and the
/// decoding deterministic, so the same bytes there can only decode to the same value and
/// length.
///
/// Only the canonical layout our writer produces (`fixarray(4)`, integer time, `bin8` id,
/// known kind) takes this path; every other payload, and every payload that fails on it, goes
/// to [`decode_payload`] itself, so errors and odd encodings are answered by the reference.
pub struct PayloadDecoder<E = Event> {
    actor_bytes: Vec<u8>,
    actor: Option<Actor>,
    /// The envelope `decode_ref` returned last, and whether its actor is `actor`.
    last: Option<Envelope<E>>,
    last_has_actor: bool,
}

impl<E: Vocabulary> Default for PayloadDecoder<E> {
    fn default() -> Self {
        PayloadDecoder {
            actor_bytes: Vec::new(),
            actor: None,
            last: None,
            last_has_actor: false,
        }
    }
}

impl<E: Vocabulary> PayloadDecoder<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Same as [`decode_payload`]; the actor is cloned from the last one when unchanged.
    pub fn decode(
        &mut self,
        seq: u64,
        kind: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Envelope<E>, PayloadError> {
        match self.fast(kind, payload) {
            Some((time, id, event)) => Ok(Envelope {
                seq,
                time,
                id,
                actor: self.actor.clone().expect("the fast path sets the actor"),
                event,
            }),
            None => E::decode_from(seq, kind, flags, payload),
        }
    }

    /// Same as [`decode_payload`], into an envelope the decoder keeps: with an unchanged actor
    /// nothing of it is allocated or freed. For folds, which only look at each event once.
    pub fn decode_ref(
        &mut self,
        seq: u64,
        kind: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<&Envelope<E>, PayloadError> {
        match self.fast(kind, payload) {
            Some((time, id, event)) => match &mut self.last {
                Some(env) if self.last_has_actor => {
                    env.seq = seq;
                    env.time = time;
                    env.id = id;
                    env.event = event;
                }
                _ => {
                    self.last = Some(Envelope {
                        seq,
                        time,
                        id,
                        actor: self.actor.clone().expect("the fast path sets the actor"),
                        event,
                    });
                    self.last_has_actor = true;
                }
            },
            None => {
                self.last_has_actor = false;
                self.last = Some(E::decode_from(seq, kind, flags, payload)?);
            }
        }
        Ok(self.last.as_ref().expect("just set"))
    }

    /// Time, id and event of a canonical payload, with `self.actor` its actor; `None` sends
    /// the payload to `decode_payload`.
    fn fast(&mut self, kind: u16, payload: &[u8]) -> Option<(Micros, Uuid, E)> {
        let rest = payload.strip_prefix(&[0x94])?;
        let time_len = int_len(rest)?;
        let time: Micros = element(&rest[..time_len])?;
        let rest = &rest[time_len..];
        if rest.len() < 18 || rest[..2] != [0xc4, 16] {
            return None;
        }
        let id = element::<wire::EventId>(&rest[..18])?.0;
        let rest = &rest[18..];
        let body = match rest.strip_prefix(&self.actor_bytes[..]) {
            Some(body) if self.actor.is_some() => body,
            _ => {
                self.last_has_actor = false;
                self.actor = None;
                let mut de = rmp_serde::Deserializer::new(rest);
                de.set_max_depth(ELEMENT_DEPTH);
                let actor = Actor::deserialize(&mut de).ok()?;
                let body = *de.get_ref();
                self.actor_bytes.clear();
                self.actor_bytes
                    .extend_from_slice(&rest[..rest.len() - body.len()]);
                self.actor = Some(actor);
                body
            }
        };
        let event = E::decode_known_body(kind, body)?;
        Some((time, id, event))
    }
}

/// Why a fold of events stops: the compatibility rule refuses a kind it must understand and
/// does not, and events fold in seq order only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    #[error(
        "event {seq} has kind {kind}, which this dispatch does not know and must understand; \
         the journal was written by a newer dispatch: upgrade dispatch"
    )]
    MustUnderstand { seq: u64, kind: u16 },
    #[error("event {seq} follows event {last}: events must be folded in seq order")]
    OutOfOrder { seq: u64, last: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("payload does not encode: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("payload does not decode: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
}

/// A job id for tests: `n` must not be 0.
#[cfg(test)]
pub(crate) fn test_job(n: u32) -> crate::slurm::JobId {
    crate::slurm::JobId::new(n).expect("a test job id is not 0")
}

/// The actor of test histories and journals: user `u` on host `h`, pid 1, no command.
#[cfg(test)]
pub(crate) fn test_actor() -> Actor {
    Actor {
        user: "u".into(),
        host: "h".into(),
        pid: 1,
        command: vec![],
    }
}

/// A small event for test journals: a launch whose submission id and pid are `i`.
#[cfg(test)]
pub(crate) fn test_launched(i: u32) -> Event {
    Event::WorkerLaunched(pool::WorkerLaunched {
        submission_id: Uuid::from_u128(u128::from(i)),
        srun_pid: i,
    })
}

/// The `seq`-th envelope of a test history: fixed actor and id, `seq` as its time.
#[cfg(test)]
pub(crate) fn test_envelope<E>(seq: u64, event: E) -> Envelope<E> {
    Envelope {
        seq,
        time: Micros(seq as i64),
        id: Uuid::nil(),
        actor: test_actor(),
        event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::event::pool::*;

    fn actor(pid: u32, cmd: &[&str]) -> Actor {
        Actor {
            user: "alice".to_owned(),
            host: "login01".to_owned(),
            pid,
            command: cmd.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Bodies of every shape the event kinds use (strings, options, vectors, nested structs,
    /// digests, times); the decoder treats every kind alike, through the same macro.
    fn one_of_each() -> Vec<Event> {
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        vec![
            Event::Genesis(Genesis {
                journal_id: id,
                format_version: 1,
            }),
            Event::Recovered(Recovered {
                segment: "segment-00000001.djl".to_owned(),
                offset: 4096,
                length: 17,
                sha256: Sha256Digest([7; 32]),
                saved_as: "segment-00000001.djl.torn-4096-abcdef".to_owned(),
                reason: "the file ends inside a frame".to_owned(),
            }),
            Event::PoolAttached(PoolAttached {
                pool: "p".to_owned(),
                allocation: Allocation {
                    job_id: test_job(42),
                    node: "n1".to_owned(),
                    user: "alice".to_owned(),
                    start_time: Micros(1),
                    end_time: Micros(-5),
                    cpus: 8,
                    mem_mb: 1 << 40,
                    partition: "gpu".to_owned(),
                    account: "acct".to_owned(),
                    qos: "normal".to_owned(),
                },
            }),
            Event::PoolDetached(PoolDetached {
                pool: "p".to_owned(),
            }),
            Event::WorkerSubmitIntent(WorkerSubmitIntent {
                pool: "p".to_owned(),
                worker: "w".to_owned(),
                submission_id: id,
                cpus: 2,
                mem_mb: 100,
                publication_timeout_s: 30,
                command: vec!["sleep".to_owned(), "1".to_owned()],
            }),
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: id,
                srun_pid: 99,
            }),
            Event::WorkerLaunchFailed(WorkerLaunchFailed {
                submission_id: id,
                definite: true,
                reason: "no".to_owned(),
            }),
            Event::WorkerStepObserved(WorkerStepObserved {
                submission_id: id,
                step_id: 3,
            }),
            Event::WorkerStopIntent(WorkerStopIntent {
                submission_id: id,
                grace_s: 10,
            }),
            Event::WorkerExited(WorkerExited {
                submission_id: id,
                code: None,
                signal: Some(9),
            }),
            Event::WorkerTerminal(WorkerTerminal {
                submission_id: id,
                proof: "sacct".to_owned(),
            }),
            Event::JobSubmitIntent(crate::event::jobs::JobSubmitIntent {
                submission_id: id,
                worker: "w".to_owned(),
                target: Some("t".to_owned()),
                cpus: 1,
                mem_mb: 2,
                time_s: 3,
                publication_timeout_s: 4,
                command: vec![],
            }),
            Event::Unknown {
                kind: 999,
                flags: 0,
                payload: Vec::new(),
            },
        ]
    }

    /// The worker journal's bodies of those shapes, for its own decoder.
    fn worker_ones() -> Vec<WorkerEvent> {
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        vec![
            WorkerEvent::SupervisorStarted(crate::event::worker::SupervisorStarted {
                submission_id: id,
                job_id: Some(7),
                step_id: None,
                node: "n".to_owned(),
                cpu_set: "0-3".to_owned(),
                deadline: Micros(99),
                grace_s: 5,
                command: vec!["a".to_owned()],
            }),
            WorkerEvent::PayloadStarted(crate::event::worker::PayloadStarted { pid: 1 }),
            WorkerEvent::ShutdownSignalled(crate::event::worker::ShutdownSignalled {
                signal: "TERM".to_owned(),
                reason: "deadline".to_owned(),
            }),
            WorkerEvent::PayloadExited(crate::event::worker::PayloadExited {
                code: Some(-1),
                signal: None,
                interrupted: true,
            }),
        ]
    }

    fn payload<E: Vocabulary>(time: i64, actor: &Actor, ev: &E) -> Vec<u8> {
        let mut out = Vec::new();
        let id = Uuid::from_u128((time as u128).wrapping_mul(31));
        // An unknown kind's payload still carries the envelope fields.
        if ev.kind_name() == "Unknown" {
            rmp_serde::encode::write(&mut out, &(Micros(time), id, actor, "future body")).unwrap()
        } else {
            encode_payload(&mut out, Micros(time), &id, actor, ev).unwrap()
        }
        out
    }

    /// The decoder's answer, both ways, must be decode_payload's, error text included.
    fn check<E: Vocabulary>(
        dec: &mut PayloadDecoder<E>,
        seq: u64,
        kind: u16,
        flags: u16,
        p: &[u8],
    ) {
        let want = decode_payload_of::<E>(seq, kind, flags, p).map_err(|e| e.to_string());
        let owned = dec.decode(seq, kind, flags, p).map_err(|e| e.to_string());
        assert_eq!(owned, want, "decode of {p:02x?}");
        let lent = dec
            .decode_ref(seq, kind, flags, p)
            .cloned()
            .map_err(|e| e.to_string());
        assert_eq!(lent, want, "decode_ref of {p:02x?}");
    }

    #[test]
    fn decoder_agrees_with_decode_payload_on_a_stream() {
        let actors = [
            actor(1, &["dispatch", "agent"]),
            actor(1, &["dispatch", "agent", "x"]),
            actor(2, &[]),
            actor(70_000, &["dispatch", "pool", "submit"]),
        ];
        let mut dec = PayloadDecoder::<Event>::new();
        let mut seq = 0;
        // Runs of one actor, actor changes, and back again: every cache transition.
        for round in 0..3 {
            for (i, a) in actors.iter().enumerate() {
                for ev in one_of_each() {
                    for _ in 0..=(round + i) % 3 {
                        seq += 1;
                        let time = [0, 1, -1, 127, -33, 300, i64::MAX, i64::MIN][seq as usize % 8];
                        let p = payload(time, a, &ev);
                        // The writer's own payloads of known kinds must take the fast path.
                        let known = !matches!(ev, Event::Unknown { .. });
                        assert_eq!(
                            PayloadDecoder::<Event>::new().fast(ev.kind(), &p).is_some(),
                            known
                        );
                        check(&mut dec, seq, ev.kind(), ev.flags(), &p);
                    }
                }
            }
        }
    }

    /// The worker journal's decoder: the same agreement, and the fast path for its kinds.
    #[test]
    fn worker_decoder_agrees_with_its_decode_payload() {
        let a = actor(7, &["dispatch", "worker", "run"]);
        let b = actor(8, &[]);
        let mut dec = PayloadDecoder::<WorkerEvent>::new();
        let mut seq = 0;
        for actor in [&a, &a, &b, &a] {
            for ev in worker_ones() {
                seq += 1;
                let p = payload(seq as i64, actor, &ev);
                assert!(PayloadDecoder::<WorkerEvent>::new()
                    .fast(ev.kind(), &p)
                    .is_some());
                check(&mut dec, seq, ev.kind(), ev.flags(), &p);
                for cut in [1, p.len() / 2, p.len() - 1] {
                    check(&mut dec, seq, ev.kind(), ev.flags(), &p[..cut]);
                }
                // The coordinator's decoder does not know the worker's kinds.
                let coordinator = decode_payload(seq, ev.kind(), ev.flags(), &p).unwrap();
                assert!(matches!(coordinator.event, Event::Unknown { .. }));
            }
        }
    }

    #[test]
    fn decoder_agrees_on_every_cut_and_flip() {
        let a = actor(7, &["dispatch", "pool", "run"]);
        for ev in one_of_each() {
            let good = payload(1_700_000_000_000_000, &a, &ev);
            for flags in [0, FLAG_MUST_UNDERSTAND] {
                for cut in 0..good.len() {
                    let mut dec = PayloadDecoder::<Event>::new();
                    check(&mut dec, 1, ev.kind(), flags, &good);
                    check(&mut dec, 2, ev.kind(), flags, &good[..cut]);
                    check(&mut dec, 3, ev.kind(), flags, &good);
                }
            }
            for at in 0..good.len() {
                for x in [0x01, 0x10, 0x80, 0xff] {
                    let mut bad = good.clone();
                    bad[at] ^= x;
                    // Primed with the good actor, so the mutated bytes meet the cache.
                    let mut dec = PayloadDecoder::<Event>::new();
                    check(&mut dec, 1, ev.kind(), ev.flags(), &good);
                    check(&mut dec, 2, ev.kind(), ev.flags(), &bad);
                    check(&mut dec, 3, ev.kind(), ev.flags(), &good);
                    // A known payload under another kind's code.
                    check(&mut dec, 4, 110, 0, &bad);
                }
            }
        }
    }

    #[test]
    fn decoder_agrees_on_other_encodings() {
        let a = actor(7, &["dispatch"]);
        let mut dec = PayloadDecoder::<Event>::new();
        for ev in one_of_each() {
            let canonical = payload(5, &a, &ev);
            check(&mut dec, 1, ev.kind(), 0, &canonical);
            // array16 instead of fixarray for the envelope.
            let mut wide = vec![0xdc, 0, 4];
            wide.extend_from_slice(&canonical[1..]);
            check(&mut dec, 2, ev.kind(), 0, &wide);
            // Bytes after the envelope, which decode_payload ignores.
            let mut trailing = canonical.clone();
            trailing.extend_from_slice(&[0xc0, 0x01]);
            check(&mut dec, 3, ev.kind(), 0, &trailing);
            // Structs as maps (rmp-serde's named form), which decode_payload also accepts.
            if !matches!(ev, Event::Unknown { .. }) {
                let id = Uuid::from_u128(5);
                let named = match &ev {
                    Event::WorkerLaunched(b) => {
                        rmp_serde::to_vec_named(&(Micros(5), id, &a, b)).unwrap()
                    }
                    _ => rmp_serde::to_vec_named(&(Micros(5), id, &a, 0u8)).unwrap(),
                };
                check(&mut dec, 4, ev.kind(), 0, &named);
            }
            // A five-element array with the same four in front.
            let mut five = canonical.clone();
            five[0] = 0x95;
            five.push(0xc0);
            check(&mut dec, 5, ev.kind(), 0, &five);
            check(&mut dec, 6, ev.kind(), 0, &canonical);
        }
    }

    #[test]
    fn decoder_agrees_on_random_bytes() {
        let a = actor(7, &["dispatch", "agent"]);
        let good = payload(9, &a, &one_of_each()[5]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut dec = PayloadDecoder::<Event>::new();
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keep a good prefix of random length, so that many cases reach deep into it.
            let keep = (x % good.len() as u64) as usize;
            let mut p = good[..keep].to_vec();
            let extra = (x >> 20) % 24;
            for k in 0..extra {
                p.push((x >> (k % 56)) as u8 ^ k as u8);
            }
            let kind = [111, 110, 113, 116, 1, 2, 999][(i % 7) as usize];
            check(&mut dec, i, kind, 0, &good);
            check(&mut dec, i, kind, (x >> 40) as u16 & 1, &p);
        }
    }
}
