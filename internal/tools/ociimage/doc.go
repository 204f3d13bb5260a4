// Package ociimage writes single-layer container images as OCI image
// layout tarballs, the form `ctr images import` (and `docker load`,
// `podman load`, skopeo's oci-archive:) reads, without a registry, a
// Docker daemon or a base image.
//
// The guarantee is reproducibility: the same Image gives the same bytes,
// and so the same manifest digest, on every machine and every run. To
// keep it, nothing the build host decides reaches the output:
//
//   - every timestamp in both tars is Image.Created (the Unix epoch by
//     default), and the config's "created" is the same instant;
//   - every entry is owned by uid 0 and gid 0 with no user or group name;
//   - the layer lists its entries sorted by path, each directory before
//     what it holds, and every missing parent directory is added (mode
//     0755); the outer tar holds oci-layout, index.json and the blobs
//     sorted by digest;
//   - modes are the ones given, never the host file's, and file contents
//     are bytes the caller passes in;
//   - JSON comes from encoding/json, whose output is stable (maps sorted).
//
// The layer is an uncompressed tar (application/vnd.oci.image.layer.v1.tar):
// gzip would make the bytes depend on the compressor's version, and
// images written here are imported from a file, not pulled over a network.
//
// WriteIndex writes images of several platforms (a release's amd64 and
// arm64) as one multi-platform image: index.json lists an image index,
// whose digest is the image's, listing each platform's manifest, the same
// manifest Write writes for that image alone. InspectIndex reads it back.
//
// Not covered: multi-layer images, hard links,
// device nodes, extended attributes and file capabilities. Inspect reads a
// layout back and checks every digest, and every layer entry against what
// Layer writes (no path escaping the root, none twice, none under a
// symlink); it is what the tests and callers use to confirm what they wrote.
package ociimage
