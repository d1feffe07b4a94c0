//! Opens a task's stores (Kafka's `ProcessorStateManager` and
//! `StateDirectory`): `state.dir/<application.id>/<task>/rocksdb/<store>`,
//! the task directory locked while the task lives, and the checkpoint that
//! says how far the persistent stores already reflect their changelogs.
//!
//! A persistent store without a checkpoint entry cannot be trusted (it may
//! hold writes past what was committed, or nothing) and is wiped before a
//! full restore, as Kafka does; in-memory stores always restore in full.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rill_state::cache::{CacheBudget, RecordCache};
use rill_state::state_dir::{open_store, read_checkpoint};
use rill_state::{KeyValueStore, StoreBackend, TaskDirLock};

use crate::error::{Result, StreamsError};
use crate::processor_context::{StoreHandle, Stores};
use crate::task_id::TaskId;
use crate::topology::Topology;

/// Where each logged store restores from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestorePlan {
    pub store: String,
    pub topic: String,
    pub partition: i32,
    /// First changelog offset to apply (0: from the beginning).
    pub from: i64,
}

pub(crate) struct OpenedState {
    pub stores: Stores,
    pub lock: Option<TaskDirLock>,
    pub dir: Option<PathBuf>,
    pub restore: Vec<RestorePlan>,
    /// Whether the task has a store worth checkpointing.
    pub persistent: bool,
}

pub(crate) fn task_dir(state_dir: &Path, application_id: &str, task: TaskId) -> PathBuf {
    rill_state::state_dir::task_dir(state_dir, application_id, &task.to_string())
}

pub(crate) fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

#[allow(clippy::too_many_arguments)] // one per thing a task's stores open with
pub(crate) fn open(
    topology: &Topology,
    task: TaskId,
    application_id: &str,
    state_dir: &Path,
    default_backend: StoreBackend,
    cache_budget: Option<&Arc<CacheBudget>>,
    exactly_once: bool,
    rocksdb: &Arc<rill_state::RocksDbShared>,
) -> Result<OpenedState> {
    let st = &topology.subtopologies[task.subtopology as usize];
    let state_err = |e: rill_state::Error| StreamsError::State {
        task: task.to_string(),
        source: e,
    };
    if st.stores.is_empty() {
        return adopt(
            topology,
            task,
            application_id,
            Vec::new(),
            None,
            None,
            cache_budget,
            exactly_once,
        );
    }
    let dir = task_dir(state_dir, application_id, task);
    let lock = TaskDirLock::acquire(&dir).map_err(state_err)?;
    let (checkpoint, corrupt) = read_checkpoint(&dir).map_err(state_err)?;
    if let Some(e) = corrupt {
        tracing::warn!(task = %task, "{e}; wiping the task's stores and restoring them in full");
    }
    let mut opened = Vec::with_capacity(st.stores.len());
    let task_name = task.to_string();
    for name in &st.stores {
        let def = &topology.stores[name];
        let backend = def.backend.unwrap_or(default_backend);
        let store =
            open_store(backend, name, &dir, Some(&task_name), rocksdb).map_err(state_err)?;
        let changelog = (changelog_topic(application_id, name), task.partition);
        let checkpointed = store
            .persistent()
            .then(|| checkpoint.offsets.get(&changelog).copied())
            .flatten();
        opened.push(OpenStore {
            name: name.clone(),
            store,
            checkpointed,
        });
    }
    adopt(
        topology,
        task,
        application_id,
        opened,
        Some(lock),
        Some(dir),
        cache_budget,
        exactly_once,
    )
}

/// One store as opened, before the task's wrappers.
pub(crate) struct OpenStore {
    pub name: String,
    pub store: Box<dyn KeyValueStore>,
    /// The changelog offset its content reflects (`None`: unknown, so a
    /// persistent store is wiped and restored in full).
    pub checkpointed: Option<i64>,
}

/// Wraps a task's opened stores for processing (transactional under EOS,
/// cached where defined) and plans each logged store's restoration from
/// its `checkpointed` offset. [`open`] ends here; so does a standby's
/// promotion (KIP-441), whose stores, still open, restore from the
/// standby's positions, so only the tail is read. `stores` must be every
/// store of the task's sub-topology.
#[allow(clippy::too_many_arguments)]
pub(crate) fn adopt(
    topology: &Topology,
    task: TaskId,
    application_id: &str,
    stores: Vec<OpenStore>,
    lock: Option<TaskDirLock>,
    dir: Option<PathBuf>,
    cache_budget: Option<&Arc<CacheBudget>>,
    exactly_once: bool,
) -> Result<OpenedState> {
    let mut out = OpenedState {
        stores: Stores::new(),
        lock,
        dir,
        restore: Vec::new(),
        persistent: false,
    };
    for opened in stores {
        add_store(
            topology,
            task,
            application_id,
            opened,
            cache_budget,
            exactly_once,
            &mut out,
        )?;
    }
    Ok(out)
}

/// The most a persistent store buffers between commits under
/// at-least-once before it writes the batch to RocksDB.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Wraps one opened store for an active task (transactional under EOS,
/// cached when its definition says so) and plans its restoration.
fn add_store(
    topology: &Topology,
    task: TaskId,
    application_id: &str,
    opened: OpenStore,
    cache_budget: Option<&Arc<CacheBudget>>,
    exactly_once: bool,
    out: &mut OpenedState,
) -> Result<()> {
    let OpenStore {
        name,
        mut store,
        checkpointed,
    } = opened;
    let def = &topology.stores[&name];
    if exactly_once {
        // Uncommitted writes stay out of the store until the thread's
        // transaction commits, so a crash never leaves aborted state on
        // disk and a restart restores only the changelog tail.
        store = Box::new(rill_state::TransactionalStore::new(store));
    } else if store.persistent() {
        // At-least-once: RocksDB gets each commit's writes as one batch,
        // one put per key (see rill_state::transactional).
        store = Box::new(rill_state::TransactionalStore::write_buffer(
            store,
            WRITE_BUFFER_BYTES,
        ));
    }
    out.persistent |= store.persistent();
    let changelog = def
        .logged
        .then(|| (changelog_topic(application_id, &name), task.partition));
    if let Some((topic, partition)) = &changelog {
        if checkpointed.is_none() && store.persistent() {
            store.clear().map_err(|e| StreamsError::State {
                task: task.to_string(),
                source: e,
            })?;
        }
        out.restore.push(RestorePlan {
            store: name.clone(),
            topic: topic.clone(),
            partition: *partition,
            from: checkpointed.unwrap_or(0),
        });
    }
    let mut handle = StoreHandle::new(
        store,
        cache_budget
            .filter(|_| def.cached)
            .map(|b| RecordCache::new(b.clone())),
        changelog,
    );
    handle.send_old_values = topology.send_old_values.contains(&name);
    out.stores.insert(name, handle);
    Ok(())
}
