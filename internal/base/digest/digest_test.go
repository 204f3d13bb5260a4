package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestSHA256Vectors: the examples of FIPS 180-4 (NIST's "abc" and the
// two-block message) and the empty message.
func TestSHA256Vectors(t *testing.T) {
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq": "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	} {
		if got := SHA256([]byte(in)); hex.EncodeToString(got[:]) != want {
			t.Errorf("SHA256(%q) = %x; want %s", in, got, want)
		}
	}
}

// TestSHA256AsCryptoSHA256: every length from 0 to 1,000 bytes (every
// padding case: the length in the same block or the next, block
// boundaries), of random bytes, digests as crypto/sha256 digests it.
func TestSHA256AsCryptoSHA256(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := range len(buf) + 1 {
		if got, want := SHA256(buf[:n]), sha256.Sum256(buf[:n]); !bytes.Equal(got[:], want[:]) {
			t.Fatalf("SHA256 of %d bytes = %x; crypto/sha256 says %x", n, got, want)
		}
	}
	big := bytes.Repeat([]byte("nodevol-emptydir\x00"), 10000)
	if got, want := SHA256(big), sha256.Sum256(big); got != want {
		t.Errorf("SHA256 of %d bytes = %x; crypto/sha256 says %x", len(big), got, want)
	}
}
