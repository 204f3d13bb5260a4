package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The soak talks to an API server that it restarts now and then: every
// call is retried while the server is away.

// apiRetryLimit is how long a call is retried.
const apiRetryLimit = 3 * time.Minute

// transient says whether an API call's error may go away on its own:
// anything but an answer that the request itself is wrong (4xx, but 429
// Too Many Requests) or a 404 or 409. A call that timed out is transient
// (the client's 5 s: an API server slowed down by the load, or restarting);
// retry stops when its own context ends.
func transient(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code/100 == 5 || se.Code == http.StatusTooManyRequests
	}
	return true // the connection: refused, reset, timed out
}

// retry calls fn until it returns nil or an error that is not transient,
// for at most apiRetryLimit.
func retry(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(apiRetryLimit)
	for {
		err := fn()
		if !transient(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podSeen is what the API server said of one pod of the soak's namespace.
type podSeen struct {
	UID     string
	Running bool      // phase Running, every container running
	RanAt   time.Time // when Running was first seen
	Gone    bool      // deleted from the API
	GoneAt  time.Time
	Phase   corev1.PodPhase
	Node    string
}

// podCache follows the pods of a namespace with the API's watch, listing
// them again whenever the watch ends (the API server restarted, the
// resource version expired).
type podCache struct {
	cp     *controlPlane
	client *http.Client // no timeout: a watch lasts
	ns     string

	mu     sync.Mutex
	pods   map[string]*podSeen // by name
	lists  int
	synced bool
}

func newPodCache(cp *controlPlane, ns string) (*podCache, error) {
	tlsCfg, err := cp.pki.clientTLS(adminCert)
	if err != nil {
		return nil, err
	}
	return &podCache{cp: cp, ns: ns, pods: map[string]*podSeen{},
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}}, nil
}

// get is what is known of the pod by name.
func (c *podCache) get(name string) (podSeen, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[name]
	if !ok {
		return podSeen{}, false
	}
	return *p, true
}

// update records a pod as the API server has it now.
func (c *podCache) update(p *corev1.Pod, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.pods[p.Name]
	if !ok || s.UID != string(p.UID) {
		s = &podSeen{UID: string(p.UID)}
		c.pods[p.Name] = s
	}
	s.Phase, s.Node = p.Status.Phase, p.Spec.NodeName
	running := p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0
	for _, cs := range p.Status.ContainerStatuses {
		running = running && cs.State.Running != nil
	}
	if running && !s.Running {
		s.Running, s.RanAt = true, now
	}
}

// gone records the pod's deletion.
func (c *podCache) gone(name, uid string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.pods[name]; ok && s.UID == uid && !s.Gone {
		s.Gone, s.GoneAt = true, now
	}
}

// run follows the namespace until ctx ends.
func (c *podCache) run(ctx context.Context) {
	for ctx.Err() == nil {
		rv, err := c.list(ctx)
		if err == nil {
			err = c.watch(ctx, rv)
		}
		if ctx.Err() == nil && err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// list reads every pod, marks the ones no longer there gone, and returns
// the list's resource version.
func (c *podCache) list(ctx context.Context) (string, error) {
	var list corev1.PodList
	if err := c.cp.get(ctx, "/api/v1/namespaces/"+c.ns+"/pods", &list); err != nil {
		return "", err
	}
	now := time.Now()
	there := map[string]string{}
	for i := range list.Items {
		c.update(&list.Items[i], now)
		there[list.Items[i].Name] = string(list.Items[i].UID)
	}
	c.mu.Lock()
	var gone [][2]string
	for name, s := range c.pods {
		if uid, ok := there[name]; (!ok || uid != s.UID) && !s.Gone {
			gone = append(gone, [2]string{name, s.UID})
		}
	}
	c.lists++
	c.synced = true
	c.mu.Unlock()
	for _, g := range gone {
		c.gone(g[0], g[1], now)
	}
	return list.ResourceVersion, nil
}

// watchEvent is one event of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watch follows the namespace's pods from resource version rv until the
// stream ends.
func (c *podCache) watch(ctx context.Context, rv string) error {
	q := url.Values{"watch": {"true"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL("/api/v1/namespaces/"+c.ns+"/pods?"+q.Encode()), nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		now := time.Now()
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
			var p corev1.Pod
			if err := json.Unmarshal(ev.Object, &p); err != nil {
				return err
			}
			if ev.Type == "DELETED" {
				c.gone(p.Name, string(p.UID), now)
			} else {
				c.update(&p, now)
			}
		case "ERROR": // 410 Gone: list again
			var st metav1.Status
			_ = json.Unmarshal(ev.Object, &st)
			return fmt.Errorf("watch: %s", st.Message)
		}
	}
}
