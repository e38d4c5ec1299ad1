//! `wasi:keyvalue` for guests: the draft's `store`, `atomics` and `batch` interfaces, served
//! from the run's [`RunState`] (see `crate::kv`). Linked for every plugin; a bucket its
//! manifest does not grant is refused at `open` with `access-denied`.

use wasmtime::component::{HasSelf, Linker, Resource};

use super::state::HostState;
use crate::kv::run::KvError;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "wasi:keyvalue/imports",
        // Reads reach the store, so every call may wait; to the guest they still block. A read
        // the store cannot answer ends the run (a trap the host classifies), so a guest never
        // mistakes an outage for an answer.
        imports: { default: async | trappable },
        with: {
            "wasi:keyvalue/store.bucket": super::KvBucket,
        },
    });
}

use bindings::wasi::keyvalue::{atomics, batch, store};

/// An open bucket, as the guest holds it: its handle in the run's state. `pub` because the
/// generated bindings re-export it; nothing outside the crate can name it.
#[allow(unreachable_pub)]
#[derive(Debug)]
pub struct KvBucket(u32);

fn get(state: &mut HostState) -> &mut HostState {
    state
}

/// Adds the three interfaces to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    store::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    atomics::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    batch::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    Ok(())
}

/// What the guest gets: the value, the WIT's error, or (the store did not answer) a trap.
type Answer<T> = wasmtime::Result<Result<T, store::Error>>;

fn answer<T>(result: Result<T, KvError>) -> Answer<T> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(KvError::AccessDenied(_)) => Ok(Err(store::Error::AccessDenied)),
        Err(KvError::Other(text)) => Ok(Err(store::Error::Other(text))),
        Err(KvError::Unavailable(text)) => Err(wasmtime::Error::msg(format!(
            "the state store did not answer: {text}"
        ))),
    }
}

impl HostState {
    fn handle(&mut self, bucket: &Resource<KvBucket>) -> Result<u32, KvError> {
        self.check_selected().map_err(KvError::Other)?;
        self.table()
            .get(bucket)
            .map(|b| b.0)
            .map_err(|e| KvError::Other(format!("no such bucket: {e}")))
    }
}

impl store::Host for HostState {
    async fn open(&mut self, identifier: String) -> Answer<Resource<KvBucket>> {
        let opened = self.kv().open(&identifier).and_then(|handle| {
            (self.table().push(KvBucket(handle)))
                .map_err(|e| KvError::Other(format!("cannot open another bucket: {e}")))
        });
        answer(opened)
    }
}

impl store::HostBucket for HostState {
    async fn get(&mut self, bucket: Resource<KvBucket>, key: String) -> Answer<Option<Vec<u8>>> {
        let got = match self.handle(&bucket) {
            Ok(handle) => self.kv().get(handle, &key).await,
            Err(e) => Err(e),
        };
        answer(got)
    }

    async fn set(&mut self, bucket: Resource<KvBucket>, key: String, value: Vec<u8>) -> Answer<()> {
        let handle = self.handle(&bucket);
        answer(handle.and_then(|handle| self.kv().set(handle, &key, value)))
    }

    async fn delete(&mut self, bucket: Resource<KvBucket>, key: String) -> Answer<()> {
        let handle = self.handle(&bucket);
        answer(handle.and_then(|handle| self.kv().delete(handle, &key)))
    }

    async fn exists(&mut self, bucket: Resource<KvBucket>, key: String) -> Answer<bool> {
        let exists = match self.handle(&bucket) {
            Ok(handle) => self.kv().exists(handle, &key).await,
            Err(e) => Err(e),
        };
        answer(exists)
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<KvBucket>,
        cursor: Option<u64>,
    ) -> Answer<store::KeyResponse> {
        let listed = match self.handle(&bucket) {
            Ok(handle) => self.kv().list(handle, cursor).await,
            Err(e) => Err(e),
        };
        answer(listed.map(|(keys, cursor)| store::KeyResponse { keys, cursor }))
    }

    async fn drop(&mut self, bucket: Resource<KvBucket>) -> wasmtime::Result<()> {
        self.table().delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for HostState {
    async fn increment(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
        delta: u64,
    ) -> Answer<u64> {
        let sum = match self.handle(&bucket) {
            Ok(handle) => self.kv().increment(handle, &key, delta).await,
            Err(e) => Err(e),
        };
        answer(sum)
    }
}

impl batch::Host for HostState {
    async fn get_many(
        &mut self,
        bucket: Resource<KvBucket>,
        keys: Vec<String>,
    ) -> Answer<Vec<Option<(String, Vec<u8>)>>> {
        let found = match self.handle(&bucket) {
            Ok(handle) => self.kv().get_many(handle, keys).await,
            Err(e) => Err(e),
        };
        answer(found)
    }

    async fn set_many(
        &mut self,
        bucket: Resource<KvBucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Answer<()> {
        let handle = self.handle(&bucket);
        answer(handle.and_then(|handle| {
            (key_values.into_iter()).try_for_each(|(key, value)| self.kv().set(handle, &key, value))
        }))
    }

    async fn delete_many(&mut self, bucket: Resource<KvBucket>, keys: Vec<String>) -> Answer<()> {
        let handle = self.handle(&bucket);
        answer(
            handle
                .and_then(|handle| (keys.iter()).try_for_each(|key| self.kv().delete(handle, key))),
        )
    }
}
