package emptydir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMetadataDirReadIsBounded: a metadata directory flooded with names
// of nodevol's temporary files (whoever writes in the pod directory can
// make them) is read no further than maxMetadataEntries: the plan says
// so, which a scan reports, and TearDown refuses, as for anything else
// nodevol does not leave there, changing nothing; with the flood moved
// away it goes on.
func TestMetadataDirReadIsBounded(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "kubelet"), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	md := e.metaDir(t, "cache")
	for i := range maxMetadataEntries + 10 {
		if err := os.WriteFile(filepath.Join(md, fmt.Sprintf(".nodevol.json.tmp-%016x", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	if !errors.Is(plan.metaErr, ErrUnexpectedMetadata) || !errors.Is(err, ErrUnexpectedMetadata) {
		t.Fatalf("PlanTearDown = %v, %v; want the metadata refused as unexpected", plan.metaErr, err)
	}
	if err := e.tearDown("cache"); !errors.Is(err, ErrUnexpectedMetadata) {
		t.Fatalf("TearDown = %v; want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods", testUID, "volumes/kubernetes.io~empty-dir/cache")); err != nil || !isReady(md) {
		t.Fatalf("the refused TearDown changed the volume: %v, ready %v", err, isReady(md))
	}
	for i := range maxMetadataEntries + 10 {
		os.Remove(filepath.Join(md, fmt.Sprintf(".nodevol.json.tmp-%016x", i)))
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, md)
}

// TestManyTempFilesDoNotFailTeardownHalfway: the attacker writes the
// metadata directory, here 150 ".nodevol.json.tmp-<16 hex>" files. A
// teardown the plan allows must succeed, not fail with ENOTEMPTY at the
// final rmdir after the volume directory, the ready marker and
// nodevol.json are gone: a teardown changes everything or nothing.
func TestManyTempFilesDoNotFailTeardownHalfway(t *testing.T) {
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	md := e.metaDir(t, "cache")
	for i := range 150 {
		if err := os.WriteFile(filepath.Join(md, fmt.Sprintf(".nodevol.json.tmp-%016x", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	t.Logf("PlanTearDown = %v (%s) metaErr=%v, %v", plan.Action, plan.Reason, plan.metaErr, err)
	if err := e.tearDown("cache"); err != nil {
		t.Errorf("TearDown = %v; the plan said %v, and the teardown failed after removing the volume", err, plan.Action)
	}
}
