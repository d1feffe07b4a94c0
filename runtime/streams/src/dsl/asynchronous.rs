//! The DSL's async operators: each adds one async node (see
//! `async_processing` for the order and commit rules). The closures get the
//! value (and key) by value, cloned from the record, since the future they
//! return outlives the call; the record's key, timestamp and headers go on
//! with what the future gives.

use std::convert::Infallible;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{Data, KStream};
use crate::async_processing::{AsyncAdapter, AsyncProcessor, AsyncResult, BoxError};
use crate::processor::{ErasedProcessor, ProcessorContext};
use crate::record::Record;
use crate::topology::NodeKind;

impl<K: Data + Hash, V: Data> KStream<K, V> {
    /// An async node: `start` makes the future from the record on the stream thread, `finish`
    /// forwards what it gave.
    fn then_async<K2: Data, V2: Data, T: Send + 'static>(
        &self,
        prefix: &str,
        key_changed: bool,
        start: impl Fn(&Record<K, V>) -> AsyncResult<T> + Send + Sync + 'static,
        finish: impl Fn(&mut ProcessorContext<'_, '_, K2, V2>, Record<K, V>, T) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        let (start, finish) = (Arc::new(start), Arc::new(finish));
        let factory =
            move || erase_async::<_, K, V, K2, V2>(AsyncFn(start.clone(), finish.clone()));
        self.then_kind(
            prefix,
            key_changed,
            Vec::new(),
            NodeKind::async_processor(factory),
        )
    }

    /// Maps each value with a future — a lookup in a service or a database — without stalling
    /// the stream thread: records with different keys overlap, records with the same key are
    /// mapped and forwarded in input order, and a record's offset is committed only once its
    /// future finished. A panic goes to `processing.exception.handler`, as in
    /// [`map_values`](Self::map_values).
    ///
    /// ```
    /// # use rill_streams::{Consumed, Serdes, StreamsBuilder};
    /// let b = StreamsBuilder::new();
    /// b.stream_with(&["orders"], Consumed::with(Serdes::string(), Serdes::string()))
    ///     .map_values_async(|order: String| async move {
    ///         // e.g. `client.get(url).send().await` with reqwest
    ///         order.to_uppercase()
    ///     });
    /// ```
    pub fn map_values_async<V2: Data, Fut>(
        &self,
        f: impl Fn(V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        Fut: Future<Output = V2> + Send + 'static,
    {
        self.try_map_values_async(move |v| {
            let fut = f(v);
            async move { Ok::<_, Infallible>(fut.await) }
        })
    }

    /// [`map_values_async`](Self::map_values_async) with a future that may fail: an `Err` goes
    /// to `processing.exception.handler` like a panic (the default stops the thread; RESUME
    /// drops the record).
    pub fn try_map_values_async<V2: Data, E, Fut>(
        &self,
        f: impl Fn(V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        E: Into<BoxError>,
        Fut: Future<Output = std::result::Result<V2, E>> + Send + 'static,
    {
        let changed = self.key_changed;
        self.then_async(
            "KSTREAM-MAPVALUES-ASYNC",
            changed,
            move |r: &Record<K, V>| boxed(f(r.value.clone())),
            |ctx, r, v| ctx.forward(r.with_value(v)),
        )
    }

    /// Maps each value to zero or more values with a future (see
    /// [`map_values_async`](Self::map_values_async) for the order and commit rules).
    pub fn flat_map_values_async<V2: Data, I, Fut>(
        &self,
        f: impl Fn(V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2> + Send + 'static,
        Fut: Future<Output = I> + Send + 'static,
    {
        self.try_flat_map_values_async(move |v| {
            let fut = f(v);
            async move { Ok::<_, Infallible>(fut.await) }
        })
    }

    /// [`flat_map_values_async`](Self::flat_map_values_async) with a future that may fail (see
    /// [`try_map_values_async`](Self::try_map_values_async) for what an `Err` does).
    pub fn try_flat_map_values_async<V2: Data, I, E, Fut>(
        &self,
        f: impl Fn(V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2> + Send + 'static,
        E: Into<BoxError>,
        Fut: Future<Output = std::result::Result<I, E>> + Send + 'static,
    {
        let changed = self.key_changed;
        self.then_async(
            "KSTREAM-FLATMAPVALUES-ASYNC",
            changed,
            move |r: &Record<K, V>| boxed(f(r.value.clone())),
            |ctx, r, values| {
                for v in values {
                    ctx.forward(Record {
                        key: r.key.clone(),
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    });
                }
            },
        )
    }

    /// Keeps the records whose future answers `true` (see
    /// [`map_values_async`](Self::map_values_async) for the order and commit rules).
    pub fn filter_async<Fut>(
        &self,
        p: impl Fn(K, V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V>
    where
        Fut: Future<Output = bool> + Send + 'static,
    {
        self.try_filter_async(move |k, v| {
            let fut = p(k, v);
            async move { Ok::<_, Infallible>(fut.await) }
        })
    }

    /// [`filter_async`](Self::filter_async) with a future that may fail (see
    /// [`try_map_values_async`](Self::try_map_values_async) for what an `Err` does).
    pub fn try_filter_async<E, Fut>(
        &self,
        p: impl Fn(K, V) -> Fut + Send + Sync + 'static,
    ) -> KStream<K, V>
    where
        E: Into<BoxError>,
        Fut: Future<Output = std::result::Result<bool, E>> + Send + 'static,
    {
        let changed = self.key_changed;
        self.then_async(
            "KSTREAM-FILTER-ASYNC",
            changed,
            move |r: &Record<K, V>| boxed(p(r.key.clone(), r.value.clone())),
            |ctx, r, keep| {
                if keep {
                    ctx.forward(r);
                }
            },
        )
    }

    /// A custom async processor (the async counterpart of [`process`](Self::process)), one
    /// instance per task from `factory`, connected to `stores` (read them in
    /// [`AsyncProcessor::start`], write them in [`AsyncProcessor::finish`]: both run on the
    /// stream thread, in per-key order).
    pub fn process_async<K2: Data, V2: Data, P>(
        &self,
        factory: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K2, V2>
    where
        P: AsyncProcessor<K, V, K2, V2> + 'static,
    {
        self.then_kind(
            "KSTREAM-PROCESSOR-ASYNC",
            true,
            stores.iter().map(|s| s.to_string()).collect(),
            NodeKind::async_processor(move || erase_async::<P, K, V, K2, V2>(factory())),
        )
    }
}

/// The DSL's async operators: a closure making the future from the record,
/// and what is forwarded from its output.
struct AsyncFn<S, F>(Arc<S>, Arc<F>);

impl<K, V, KOut, VOut, T, S, F> AsyncProcessor<K, V, KOut, VOut> for AsyncFn<S, F>
where
    T: Send + 'static,
    S: Fn(&Record<K, V>) -> AsyncResult<T> + Send + Sync,
    F: Fn(&mut ProcessorContext<'_, '_, KOut, VOut>, Record<K, V>, T) + Send + Sync,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    type Output = T;
    fn start(
        &mut self,
        _: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: &Record<K, V>,
    ) -> crate::error::Result<AsyncResult<T>> {
        Ok((self.0)(record))
    }
    fn finish(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: Record<K, V>,
        output: T,
    ) -> crate::error::Result<()> {
        (self.1)(ctx, record, output);
        Ok(())
    }
}

/// A user's future, boxed with its error as a [`BoxError`].
fn boxed<T, E: Into<BoxError>>(
    fut: impl Future<Output = std::result::Result<T, E>> + Send + 'static,
) -> AsyncResult<T> {
    Box::pin(async move { fut.await.map_err(Into::into) })
}

fn erase_async<P, KIn, VIn, KOut, VOut>(p: P) -> Box<dyn ErasedProcessor>
where
    P: AsyncProcessor<KIn, VIn, KOut, VOut> + 'static,
    KIn: Hash + Send + 'static,
    VIn: Send + 'static,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    Box::new(AsyncAdapter {
        inner: p,
        _types: PhantomData,
    })
}
