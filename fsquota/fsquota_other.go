//go:build !linux

package fsquota

import (
	"runtime"

	"github.com/nodevol/nodevol/internal/testhook"
)

// Project quotas are a Linux feature: every operation reports
// ErrUnsupported elsewhere.

type quotaBackend interface{}

func defaultBackend() quotaBackend { return nil }

func testKernel(testhook.QuotaKernel) quotaBackend { return nil }

type mountKey struct{}

type quotaState struct{}

func unsupportedOS(path string) error {
	return &UnsupportedError{Path: path, Reason: "project quotas are Linux-only (this is " + runtime.GOOS + ")"}
}

func (m *Manager) checkSupport(path string) error { return unsupportedOS(path) }

func (m *Manager) assign(path string, limitBytes int64) (uint32, error) {
	return 0, unsupportedOS(path)
}

func (m *Manager) clear(path string) error { return unsupportedOS(path) }

func (m *Manager) usage(path string) (Usage, error) { return Usage{}, unsupportedOS(path) }

func projectID(path string) (uint32, error) { return 0, unsupportedOS(path) }

func setProjectID(path string, id uint32) error { return unsupportedOS(path) }
