//! The topology: a graph of source, processor and sink nodes plus the state
//! stores they use, split into sub-topologies (Kafka's `Topology` and
//! `TopologyDescription`).
//!
//! Sub-topologies are the connected components of the node graph, where a
//! store shared by two processors also connects them; a repartition topic
//! (sink in one, source in another) separates them. They are numbered in the
//! order of their first node, as Kafka numbers them, so TaskIds
//! (`<subtopology>_<partition>`) are stable as long as the code is.
//!
//! Internal topic names are stored without the application id and get the
//! `<application.id>-` prefix at run time: `<app>-<name>-repartition`,
//! `<app>-<store>-changelog`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use rill_state::StoreBackend;

use crate::error::{Result, StreamsError};
use crate::error_handlers::Caught;
use crate::processor::ErasedProcessor;
use crate::record::{AnyBox, CloneFn, RawRecord};

/// Decodes a consumed record's key and value; `Err((part, reason))`.
pub(crate) type SourceDecoder = Arc<
    dyn Fn(
            &str,
            Option<&Bytes>,
            Option<&Bytes>,
        ) -> std::result::Result<RawRecord, (&'static str, String)>
        + Send
        + Sync,
>;
/// A record encoded by a sink.
pub(crate) struct Encoded {
    pub topic: Arc<str>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// `None`: the producer partitions by the key (murmur2).
    pub partition: Option<i32>,
}

/// Encodes a sink's record (key, value), given the sink's resolved topic
/// when it has a fixed one (the serdes see the real topic name); takes them
/// by value, so a serde can hand over the bytes they hold
/// (`Serde::serialize_owned`). Each serde runs guarded, so a failure says
/// which part failed.
pub(crate) type SinkEncoder = Arc<
    dyn Fn(AnyBox, AnyBox, Option<&Arc<str>>) -> std::result::Result<Encoded, SinkError>
        + Send
        + Sync,
>;

/// Why a sink could not make its record.
pub(crate) enum SinkError {
    /// The key serde failed or panicked.
    Key(Caught),
    /// The value serde failed or panicked.
    Value(Caught),
    /// The topic-name extractor or the partitioner failed or panicked.
    Route(Caught),
    /// The record was not of the sink's types (a wiring bug).
    Wiring(StreamsError),
}
pub(crate) type ProcessorFactory = Arc<dyn Fn() -> Box<dyn ErasedProcessor> + Send + Sync>;

/// A topic name as the topology knows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopicName {
    /// A user topic, used as is.
    User(String),
    /// An internal topic; the runtime prefixes `<application.id>-`.
    Internal(String),
}

impl TopicName {
    /// The topic's name on the broker: a user topic as is, an internal one as
    /// `<application_id>-<name>`.
    pub fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicName::User(t) => t.clone(),
            TopicName::Internal(t) => format!("{application_id}-{t}"),
        }
    }
}

pub(crate) enum NodeKind {
    Source {
        topics: Vec<TopicName>,
        pattern: Option<String>,
        decode: SourceDecoder,
        /// `None`: the app's `default.timestamp.extractor`.
        extractor: Option<crate::timestamp::SharedExtractor>,
    },
    Processor {
        factory: ProcessorFactory,
    },
    /// A processor whose records park while their futures run
    /// (`async_processing`): its own kind, so the synchronous dispatch
    /// tells the two apart by the match it already does.
    AsyncProcessor {
        factory: ProcessorFactory,
    },
    Sink {
        /// For the description; `None` when the topic is computed per record.
        topic: Option<TopicName>,
        encode: SinkEncoder,
    },
}

impl NodeKind {
    /// A synchronous processor made by `factory` for each task.
    pub(crate) fn processor(
        factory: impl Fn() -> Box<dyn ErasedProcessor> + Send + Sync + 'static,
    ) -> Self {
        Self::Processor {
            factory: Arc::new(factory),
        }
    }

    /// An async processor (`async_processing`) made by `factory` for each task.
    pub(crate) fn async_processor(
        factory: impl Fn() -> Box<dyn ErasedProcessor> + Send + Sync + 'static,
    ) -> Self {
        Self::AsyncProcessor {
            factory: Arc::new(factory),
        }
    }
}

pub(crate) struct Node {
    pub name: String,
    pub kind: NodeKind,
    pub parents: Vec<usize>,
    pub children: Vec<usize>,
    pub stores: Vec<String>,
    /// The children's names, in order (for `forward_to`), filled by `Topology::new`.
    pub child_names: Vec<String>,
    /// Copies this node's output records (needed when it has several children).
    pub clone: CloneFn,
}

/// A state store definition.
#[derive(Debug, Clone)]
pub struct StoreDef {
    /// Store name, unique in the topology; a logged store's changelog is
    /// `<application.id>-<name>-changelog`.
    pub name: String,
    /// `None`: the app's `default.dsl.store`.
    pub backend: Option<StoreBackend>,
    /// Whether writes go to `<app>-<name>-changelog`.
    pub logged: bool,
    /// Whether a record cache sits in front of the store (KIP-63): on for
    /// DSL aggregations unless `Materialized::with_caching_disabled`; off for
    /// stores added with `add_state_store` (Kafka's `StoreBuilder` default).
    pub cached: bool,
}

/// One sub-topology: its nodes and topics.
#[derive(Debug, Clone)]
pub struct SubTopology {
    /// Sub-topology number, from 0 in node order; the first part of its task ids.
    pub id: u32,
    /// Indexes of its nodes in the topology.
    pub nodes: Vec<usize>,
    /// Topics its source nodes read.
    pub source_topics: BTreeSet<TopicName>,
    /// Regexes its source nodes subscribe to (each must match a whole topic name).
    pub source_patterns: Vec<String>,
    /// Topics its sinks write (sinks that pick a topic per record are not listed).
    pub sink_topics: BTreeSet<TopicName>,
    /// State stores its nodes use (global stores excluded).
    pub stores: BTreeSet<String>,
}

/// A global table's store and the topic it mirrors.
#[derive(Debug, Clone)]
pub struct GlobalStoreDef {
    pub name: String,
    pub topic: String,
    /// `None`: the app's `default.dsl.store`.
    pub backend: Option<StoreBackend>,
}

/// A built topology, shared by every task.
pub struct Topology {
    pub(crate) nodes: Vec<Node>,
    pub(crate) stores: BTreeMap<String, StoreDef>,
    /// Repartition topics and the sub-topology that writes them.
    pub(crate) repartition_topics: BTreeSet<String>,
    pub(crate) subtopologies: Vec<SubTopology>,
    /// Global tables' stores, by name (read by any task, no sub-topology).
    pub(crate) global_stores: BTreeMap<String, GlobalStoreDef>,
    /// Stores whose cache flushes forward old values (Kafka's `sendOldValues`).
    pub(crate) send_old_values: BTreeSet<String>,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Topology {
    pub(crate) fn new(
        nodes: Vec<Node>,
        stores: BTreeMap<String, StoreDef>,
        repartition_topics: BTreeSet<String>,
        global_stores: BTreeMap<String, GlobalStoreDef>,
    ) -> Result<Self> {
        if nodes.is_empty() {
            return Err(StreamsError::Topology(
                "the topology has no nodes; add a source with StreamsBuilder::stream".into(),
            ));
        }
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let mut nodes = nodes;
        for n in &mut nodes {
            n.child_names = n.children.iter().map(|&c| names[c].clone()).collect();
        }
        let mut t = Topology {
            nodes,
            stores,
            repartition_topics,
            subtopologies: Vec::new(),
            global_stores,
            send_old_values: BTreeSet::new(),
        };
        t.subtopologies = t.split()?;
        Ok(t)
    }

    fn split(&self) -> Result<Vec<SubTopology>> {
        let n = self.nodes.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], x: usize) -> usize {
            let mut r = x;
            while p[r] != r {
                r = p[r];
            }
            let mut y = x;
            while p[y] != r {
                let next = p[y];
                p[y] = r;
                y = next;
            }
            r
        }
        let union = |p: &mut Vec<usize>, a: usize, b: usize| {
            let (ra, rb) = (find(p, a), find(p, b));
            if ra != rb {
                p[ra.max(rb)] = ra.min(rb);
            }
        };
        let mut store_owner: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            for &c in &node.children {
                union(&mut parent, i, c);
            }
            // A global store connects nothing: every task reads its own handle.
            for s in node
                .stores
                .iter()
                .filter(|s| !self.global_stores.contains_key(*s))
            {
                if !self.stores.contains_key(s) {
                    return Err(StreamsError::Topology(format!(
                        "processor {} uses state store {s}, which is not added to the topology",
                        node.name
                    )));
                }
                match store_owner.get(s.as_str()) {
                    Some(&o) => union(&mut parent, o, i),
                    None => {
                        store_owner.insert(s.as_str(), i);
                    }
                }
            }
        }
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..n {
            let r = find(&mut parent, i);
            groups.entry(r).or_default().push(i);
        }
        let mut subs: Vec<Vec<usize>> = groups.into_values().collect();
        subs.sort_by_key(|nodes| nodes[0]);
        let mut seen_topics: BTreeMap<TopicName, String> = BTreeMap::new();
        let mut out = Vec::new();
        for (id, nodes) in subs.into_iter().enumerate() {
            let mut st = SubTopology {
                id: id as u32,
                nodes: nodes.clone(),
                source_topics: BTreeSet::new(),
                source_patterns: Vec::new(),
                sink_topics: BTreeSet::new(),
                stores: BTreeSet::new(),
            };
            for &i in &nodes {
                let node = &self.nodes[i];
                st.stores.extend(
                    node.stores
                        .iter()
                        .filter(|s| !self.global_stores.contains_key(*s))
                        .cloned(),
                );
                match &node.kind {
                    NodeKind::Source {
                        topics, pattern, ..
                    } => {
                        for t in topics {
                            if let Some(other) = seen_topics.insert(t.clone(), node.name.clone()) {
                                return Err(StreamsError::Topology(format!(
                                    "topic {t:?} is a source of both {other} and {}; a topic may feed one source only",
                                    node.name
                                )));
                            }
                            st.source_topics.insert(t.clone());
                        }
                        st.source_patterns.extend(pattern.iter().cloned());
                    }
                    NodeKind::Sink { topic: Some(t), .. } => {
                        st.sink_topics.insert(t.clone());
                    }
                    _ => {}
                }
            }
            if st.source_topics.is_empty() && st.source_patterns.is_empty() {
                return Err(StreamsError::Topology(format!(
                    "sub-topology {id} has no source (nodes: {:?})",
                    nodes
                        .iter()
                        .map(|&i| &self.nodes[i].name)
                        .collect::<Vec<_>>()
                )));
            }
            out.push(st);
        }
        Ok(out)
    }

    /// The sub-topologies (nodes connected by parent-child links or a shared store), in id order.
    pub fn subtopologies(&self) -> &[SubTopology] {
        &self.subtopologies
    }

    /// Repartition topics, without the `<application.id>-` prefix.
    pub fn repartition_topics(&self) -> impl Iterator<Item = &str> {
        self.repartition_topics.iter().map(String::as_str)
    }

    /// Every state store of the topology, DSL and Processor API (global stores excluded).
    pub fn stores(&self) -> impl Iterator<Item = &StoreDef> {
        self.stores.values()
    }

    /// Which sub-topology reads `topic` (resolved name), if any.
    pub(crate) fn subtopology_of_topic(&self, application_id: &str, topic: &str) -> Option<u32> {
        for st in &self.subtopologies {
            if st
                .source_topics
                .iter()
                .any(|t| t.resolve(application_id) == topic)
            {
                return Some(st.id);
            }
        }
        self.subtopologies.iter().find_map(|st| {
            st.source_patterns
                .iter()
                .any(|p| full_match(p, topic))
                .then_some(st.id)
        })
    }

    /// Kafka's `TopologyDescription`, as text.
    pub fn describe(&self) -> String {
        let mut s = String::from("Topologies:\n");
        for g in self.global_stores.values() {
            let _ = writeln!(
                s,
                "   Global store: {} (topic: {}, read by every task, no tasks of its own)",
                g.name, g.topic
            );
        }
        for st in &self.subtopologies {
            let _ = writeln!(s, "   Sub-topology: {}", st.id);
            for &i in &st.nodes {
                let node = &self.nodes[i];
                let names = |v: &[usize]| {
                    v.iter()
                        .map(|&j| self.nodes[j].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                match &node.kind {
                    NodeKind::Source {
                        topics, pattern, ..
                    } => {
                        let what = match pattern {
                            Some(p) => format!("topics: pattern {p}"),
                            None => format!(
                                "topics: [{}]",
                                topics.iter().map(show_topic).collect::<Vec<_>>().join(", ")
                            ),
                        };
                        let _ = writeln!(s, "    Source: {} ({what})", node.name);
                    }
                    NodeKind::Processor { .. } | NodeKind::AsyncProcessor { .. } => {
                        let _ = writeln!(
                            s,
                            "    Processor: {} (stores: [{}])",
                            node.name,
                            node.stores.join(", ")
                        );
                    }
                    NodeKind::Sink { topic, .. } => {
                        let t = topic
                            .as_ref()
                            .map(show_topic)
                            .unwrap_or_else(|| "computed per record".into());
                        let _ = writeln!(s, "    Sink: {} (topic: {t})", node.name);
                    }
                }
                if !node.children.is_empty() {
                    let _ = writeln!(s, "      --> {}", names(&node.children));
                } else {
                    let _ = writeln!(s, "      --> none");
                }
                if !node.parents.is_empty() {
                    let _ = writeln!(s, "      <-- {}", names(&node.parents));
                }
            }
            s.push('\n');
        }
        s
    }
}

fn show_topic(t: &TopicName) -> String {
    match t {
        TopicName::User(t) => t.clone(),
        TopicName::Internal(t) => format!("<application.id>-{t}"),
    }
}

/// Whether `topic` matches `pattern` in full (Java's `Pattern.matcher().matches()`).
pub(crate) fn full_match(pattern: &str, topic: &str) -> bool {
    regex_lite_match(pattern, topic)
}

fn regex_lite_match(pattern: &str, topic: &str) -> bool {
    // Anchor both ends, as Kafka matches the whole topic name.
    match regex::Regex::new(&format!("^(?:{pattern})$")) {
        Ok(re) => re.is_match(topic),
        Err(_) => false,
    }
}
