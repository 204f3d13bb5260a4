package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

// TestJSONEncoderValidUTF8Unchanged: with valid UTF-8 everywhere, every
// --json result is written exactly as encoding/json writes it (the exact
// encoder's own path too, which a name with invalid UTF-8 takes).
func TestJSONEncoderValidUTF8Unchanged(t *testing.T) {
	visible := true
	ns := mountNamespaceJSON{State: mountdetect.MountNamespaceForeign, Reason: "a <reason> & more", HostMountsVisible: &visible}
	mounts := []mountdetect.Mount{{MountPoint: "/k/pods/u/volumes/x/v/nas", FSType: "nfs4", Source: "nas:/export"}}
	failed := failureJSON{Error: "one\ntwo", Errors: []string{"one", "two"}, MoreErrors: 3}
	for _, v := range []any{
		&checkResult{Path: "/a/ü", Exists: true, FSType: "ext4", Medium: volume.MediumMemory, HugePageSize: "2Mi", NestedMounts: mounts, MountNamespace: ns, failureJSON: failed},
		&checkResult{Path: "/a", NestedMounts: []mountdetect.Mount{}},
		&rmResult{Path: "/a/b", Removed: true, NestedMounts: mounts, MountNamespace: ns, failureJSON: failed},
		&teardownResult{Path: "/k/v", PodUID: "u", Volume: "v", Medium: "Default", Action: "refuse", Mounts: mounts, Reason: "r",
			Subpaths: []subpath.Entry{{Container: "app", Index: "0", Path: "/k/s", MountPoint: true, Own: true}}, MountNamespace: ns, failureJSON: failed},
		&scanVolume{PodUID: "u", Plugin: "kubernetes.io/csi", Volume: "v", Path: "/k/v", NestedMounts: mounts, Subpaths: []subpath.Entry{},
			Verdict: verdictDanger, ReasonCode: reasonNestedMount, Reason: "r", MountNamespace: ns},
		&scanProblem{Problem: "/k/pods/x", Error: "e", OverBudget: true},
		&scanProblem{Problem: "/k/pods/x", Error: "e"},
		&scanLeftover{Leftover: "/k/pods/y"},
		&usageResult{Path: "/a", Bytes: 4096, Inodes: 1, Source: "walk", ProjectID: 7, failureJSON: failed},
		&versionInfo{Version: "v1", GoVersion: "go1", KernelFeatures: []kernelFeature{{Name: "n", About: "a", Detail: "d"}}},
	} {
		var want, got, exact bytes.Buffer
		std := json.NewEncoder(&want)
		std.SetEscapeHTML(false)
		if err := std.Encode(v); err != nil {
			t.Fatal(err)
		}
		if err := newJSONEncoder(&got).Encode(v); err != nil {
			t.Fatal(err)
		}
		if err := writeExact(&exact, reflect.ValueOf(v)); err != nil {
			t.Fatal(err)
		}
		exact.WriteByte('\n')
		if got.String() != want.String() || exact.String() != want.String() {
			t.Errorf("%T:\nencoding/json: %s\nnewJSONEncoder: %s\nwriteExact:    %s", v, want.String(), got.String(), exact.String())
		}
	}
}

// TestJSONEncoderExactNames: encoding/json writes each invalid byte of a
// string as U+FFFD, so two names differing only there looked alike. Each
// such string, in any field and nested list, now has its exact bytes
// beside it, the readable field unchanged.
func TestJSONEncoderExactNames(t *testing.T) {
	r := teardownResult{Path: "/k/v\xff", PodUID: "u", Volume: "v\xfe", Mounts: []mountdetect.Mount{{MountPoint: "/k/v\xff/n\xc3", Source: "ok"}},
		Subpaths: []subpath.Entry{{Container: "c\x80", Index: "0", Path: "/s"}}, failureJSON: failureJSON{Error: "bad \xff", Errors: []string{"fine", "bad \xff"}}}
	var out bytes.Buffer
	if err := newJSONEncoder(&out).Encode(&r); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	mount := got["mounts"].([]any)[0].(map[string]any)
	sub := got["subpaths"].([]any)[0].(map[string]any)
	for _, c := range []struct {
		obj        map[string]any
		key, exact string
	}{
		{got, "path", "/k/v\xff"}, {got, "volume", "v\xfe"}, {got, "error", "bad \xff"},
		{mount, "mountPoint", "/k/v\xff/n\xc3"}, {sub, "container", "c\x80"},
	} {
		if want := strings.ToValidUTF8(c.exact, "\ufffd"); c.obj[c.key] != want {
			t.Errorf("%s = %q; want %q, as before", c.key, c.obj[c.key], want)
		}
		enc, _ := c.obj[c.key+"Base64"].(string)
		if b, err := base64.StdEncoding.DecodeString(enc); err != nil || string(b) != c.exact {
			t.Errorf("%sBase64 = %v decodes to %q, %v; want %q", c.key, c.obj[c.key+"Base64"], b, err, c.exact)
		}
	}
	for _, key := range []string{"podUIDBase64", "sourceBase64", "indexBase64", "reasonBase64"} {
		if _, ok := got[key]; ok {
			t.Errorf("%s present for a valid name in %s", key, out.String())
		}
	}
	if _, ok := mount["sourceBase64"]; ok {
		t.Errorf("sourceBase64 present for a valid source in %s", out.String())
	}
	errs, _ := got["errorsBase64"].([]any)
	if len(errs) != 2 || errs[0] != base64.StdEncoding.EncodeToString([]byte("fine")) || errs[1] != base64.StdEncoding.EncodeToString([]byte("bad \xff")) {
		t.Errorf("errorsBase64 = %v; want each message's bytes", errs)
	}
}
