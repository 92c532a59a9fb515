//! Bytes with descriptors attached, over a Unix socket (`SCM_RIGHTS`): how `run --etcd`
//! hands its supervisor COMMAND's socket and the user's stdin, and the supervisor hands them
//! on to ns-init.

use std::io::{IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// The most descriptors one message carries: COMMAND's socket and the user's stdin.
const MAX_FDS: usize = 2;

/// Sends `message` over `sock` with `fds` attached (`SCM_RIGHTS`, at most [`MAX_FDS`]).
pub(super) fn send_with_fds(
    sock: &UnixStream,
    message: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(fds));
    }
    let sent = loop {
        match sendmsg(
            sock,
            &[IoSlice::new(message)],
            &mut control,
            SendFlags::empty(),
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    // The descriptors went with the first byte; the rest (if the socket took less) follows.
    (&*sock).write_all(&message[sent..])
}

/// Receives up to `buf.len()` bytes and the descriptors (at most [`MAX_FDS`]) sent with
/// them, close-on-exec, as [`send_with_fds`] sent them; the count is 0 at EOF. The kernel
/// ends a read at a message that carries descriptors, so what follows it is left for later
/// reads.
pub(super) fn receive_with_fds(
    sock: &UnixStream,
    buf: &mut [u8],
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    #[cfg(target_os = "linux")]
    let flags = RecvFlags::CMSG_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = RecvFlags::empty();
    let got = loop {
        match recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, flags) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    for fd in &fds {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok((got.bytes, fds))
}
