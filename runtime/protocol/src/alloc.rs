//! A global allocator that survives hostile length prefixes.
//!
//! `kafka-protocol` pre-sizes every decoded array with the element count read
//! off the wire (`Vec::with_capacity(n)`), before it knows whether the frame
//! holds `n` elements (upstream: kafka-protocol-rs PRs #152, #161, #200, open).
//! A 10-byte request claiming 2^31 topics asks for hundreds of GiB; the system
//! allocator refuses and Rust aborts the process, a panic that cannot even be
//! caught. A broker must survive any bytes a client sends.
//!
//! [`ReservingAllocator`] serves allocations of 1 GiB and more by reserving
//! address space with `mmap(MAP_NORESERVE)` instead: the kernel commits pages
//! only when they are touched, and the decoder fails on the missing bytes
//! long before touching more than the frame could fill (frames are capped by
//! `socket.request.max.bytes`). Smaller allocations go to the system allocator
//! unchanged. A binary opts in with
//! `#[global_allocator] static A: ReservingAllocator = ReservingAllocator;`:
//! `rill` (so `rill broker` survives any client), the broker fuzz target and
//! the `hostile_lengths` test do; the test and bench binaries that embed a
//! broker do not (they send the broker no hostile frames), so a hostile
//! frame sent to those would abort them.

// The one module of the protocol crate that needs unsafe code: a global
// allocator is an unsafe trait, and mmap is a C call.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations at or above this size are reserved with `mmap(MAP_NORESERVE)`.
pub const RESERVE_THRESHOLD: usize = 1 << 30;

/// See the module documentation.
pub struct ReservingAllocator;

fn is_huge(layout: &Layout) -> bool {
    layout.size() >= RESERVE_THRESHOLD && layout.align() <= 4096
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: anonymous private mapping; no file descriptor or address hint.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

// SAFETY: every block comes from the system allocator or from an mmap of
// at least the requested size, page-aligned (align <= 4096 is checked),
// and is released the way it was obtained (`is_huge` of the same layout).
unsafe impl GlobalAlloc for ReservingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(&layout) {
            // SAFETY: `map` has no preconditions beyond a size.
            unsafe { map(layout.size()) }
        } else {
            // SAFETY: the caller's contract is GlobalAlloc::alloc's.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(&layout) {
            // SAFETY: as in `alloc`; fresh anonymous mappings are zero-filled.
            unsafe { map(layout.size()) }
        } else {
            // SAFETY: the caller's contract is GlobalAlloc::alloc_zeroed's.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(&layout) {
            // SAFETY: `ptr` came from `map` with this layout's size.
            unsafe {
                libc::munmap(ptr as *mut libc::c_void, layout.size());
            }
        } else {
            // SAFETY: `ptr` came from the system allocator with `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc::realloc's contract: `new_size` rounded up to
        // `layout.align()` does not overflow isize, and the align is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_huge(&layout) && !is_huge(&new_layout) {
            // SAFETY: both layouts are the system allocator's.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new_layout` has a non-zero size (realloc's contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and hold at least the copied
            // length; the old one is freed with the layout it had.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
