//! The stdio pod shape (issue 4 "CRD and pod"): how a server that speaks newline-delimited
//! JSON-RPC on stdin/stdout runs next to the proxy.
//!
//! - init container [`INSTALL_CONTAINER`] (the proxy image) runs
//!   `berth-proxy copy-self /berth/bin/berth-proxy`, copying the statically linked berth binary
//!   into the `emptyDir` [`BIN_DIR`], so it runs in any upstream image (glibc, musl or none);
//! - the upstream sidecar (native sidecar, the user's pinned image) runs
//!   `/berth/bin/berth-proxy stdio-host --socket @berth-stdio-host --allow-uid 65533
//!   --max-children <session.maxSessions> -- <command...> <args...>`: one server process per
//!   connection;
//! - the proxy container (user [`PROXY_RUN_AS_ID`], never the server's) connects to
//!   [`STDIO_SOCKET`] once per client session (the rendered config's `upstream.socket`).
//!
//! The socket is for the proxy only (issue 40, item 7): it is an abstract Unix socket in the
//! pod's network namespace, so there is no file a server's process could unlink or replace and
//! no shared writable directory, and the host serves only peers whose credentials name the
//! proxy's user. There is no upstream port and no startup probe: the proxy's readiness already
//! waits for a first child to complete `initialize`.
//! Not responsible for: the containers common to both transports ([`super::deployment`]).

use berth_crds::McpUpstreamSpec;
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Volume, VolumeMount};

use super::container::{PROXY_RUN_AS_ID, UPSTREAM_CONTAINER, container_security_context};
use crate::render::STDIO_SOCKET;

/// Name of the init container that installs the berth binary.
pub const INSTALL_CONTAINER: &str = "berth-install";
/// Directory (an `emptyDir`) holding the berth binary in the install and upstream containers.
pub const BIN_DIR: &str = "/berth/bin";
/// Path of the berth binary inside [`BIN_DIR`].
pub const BERTH_BINARY: &str = "/berth/bin/berth-proxy";
const BIN_VOLUME: &str = "berth-bin";

/// The `emptyDir` volume of the stdio shape: the binary.
pub(super) fn volumes() -> Vec<Volume> {
    vec![Volume {
        name: BIN_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }]
}

/// The init container copying the berth binary from `proxy_image` into [`BIN_DIR`].
pub(super) fn install_container(proxy_image: &str) -> Container {
    Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(proxy_image.to_owned()),
        args: Some(vec!["copy-self".to_owned(), BERTH_BINARY.to_owned()]),
        volume_mounts: Some(vec![mount(BIN_VOLUME, BIN_DIR, false)]),
        security_context: Some(container_security_context(true)),
        ..Container::default()
    }
}

/// Turns the upstream sidecar `sidecar` (image, env, resources and security already set) into
/// the stdio host: its argv (serving only the proxy's user), and the binary directory mounted
/// read-only.
pub(super) fn stdio_host(spec: &McpUpstreamSpec, sidecar: Container) -> Container {
    let upstream = &spec.upstream;
    let mut command = vec![
        BERTH_BINARY.to_owned(),
        "stdio-host".to_owned(),
        "--socket".to_owned(),
        STDIO_SOCKET.to_owned(),
        "--allow-uid".to_owned(),
        PROXY_RUN_AS_ID.to_string(),
        "--max-children".to_owned(),
        spec.session.max_sessions.to_string(),
        "--".to_owned(),
    ];
    command.extend(upstream.command.iter().flatten().cloned());
    command.extend(upstream.args.iter().cloned());
    Container {
        name: UPSTREAM_CONTAINER.to_owned(),
        command: Some(command),
        args: None,
        ports: None,
        startup_probe: None,
        volume_mounts: Some(vec![mount(BIN_VOLUME, BIN_DIR, true)]),
        ..sidecar
    }
}

fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_socket_is_abstract_so_no_file_can_be_replaced() {
        assert!(STDIO_SOCKET.starts_with('@'), "{STDIO_SOCKET}");
    }
}
