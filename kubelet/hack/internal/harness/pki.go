package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's key material, written as PEM files into one
// directory: a CA, the API server's serving certificate, client
// certificates for the admin (the driver), each node (its kubelet), the
// scheduler, the controller manager and the API server's kubelet client,
// and the service-account signing key pair. ECDSA P-256 throughout: generated
// in microseconds, and accepted by kube-apiserver for every one of these.
type pki struct {
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

// The files a pki writes, by name under its directory.
const (
	caCertFile    = "ca.crt"
	serverCert    = "apiserver" // apiserver.crt, apiserver.key
	adminCert     = "admin"
	schedulerCert = "kube-scheduler"
	managerCert   = "kube-controller-manager"
	kubeletClient = "apiserver-kubelet-client" // the API server's, to the kubelets
	saPublicFile  = "sa.pub"
	saPrivateFile = "sa.key"
)

// certValidity covers any run; the watchdog ends runs long before.
const certValidity = 24 * time.Hour

// nodeCert is the name of the node's client certificate.
func nodeCert(node string) string { return "node-" + node }

// newPKI writes a fresh CA, the certificates and the service-account key
// pair into dir. serverIPs are the API server's addresses besides
// 127.0.0.1, with the first address of the service range
// (kubernetes.default's ClusterIP), which the serving certificate names;
// nodes are the node names that get a client certificate.
func newPKI(dir string, serverIPs []net.IP, nodes []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodevol-e2e-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, key: key}
	if err := writePEM(p.path(caCertFile), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	certs := []struct {
		name string
		tmpl x509.Certificate
	}{
		{serverCert, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, serverIPs...),
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		}},
		// system:masters may do anything: the driver reads what it checks.
		{adminCert, x509.Certificate{
			Subject:     pkix.Name{CommonName: "nodevol-e2e-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		// The names the default RBAC roles bind, as kubeadm issues them.
		{schedulerCert, x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:kube-scheduler"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		{managerCert, x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:kube-controller-manager"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		{kubeletClient, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	// The Node authorizer and NodeRestriction know each kubelet by this name.
	for _, n := range nodes {
		certs = append(certs, struct {
			name string
			tmpl x509.Certificate
		}{nodeCert(n), x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:node:" + n, Organization: []string{"system:nodes"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}})
	}
	for i, c := range certs {
		c.tmpl.SerialNumber = big.NewInt(int64(i + 2))
		if err := p.issue(c.name, &c.tmpl, now); err != nil {
			return nil, err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.path(saPrivateFile), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.path(saPublicFile), "PUBLIC KEY", pub)
}

// issue signs tmpl with the CA and writes name.crt and name.key.
func (p *pki) issue(name string, tmpl *x509.Certificate, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Minute), now.Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return fmt.Errorf("certificate %s: %w", name, err)
	}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// certPair is the paths of name's certificate and key.
func (p *pki) certPair(name string) (cert, key string) {
	return p.path(name + ".crt"), p.path(name + ".key")
}

// clientTLS is a TLS configuration that trusts only the CA and presents
// name's client certificate.
func (p *pki) clientTLS(name string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.certPair(name))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
