package client_test

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"
)

// BenchmarkTLS_RecordCrypto measures what the bulk channel's TLS costs at
// the least: sealing (client) and opening (server) one full 16 KiB record
// with AES-GCM on one core, as crypto/tls does with TLS 1.3's
// TLS_AES_128_GCM_SHA256 (negotiated where both ends have AES instructions)
// and TLS_AES_256_GCM_SHA384. With client and server on the same cores every
// byte is sealed once and opened once, so MiB/s of seal and open together
// bound TLS throughput on a core that does nothing else; the Sequential
// benchmark's plaintext cpu-us/MiB plus this benchmark's seal and open
// cpu-us/MiB (CPU time, so a busy machine does not inflate it) is the least
// CPU a MiB over TLS can cost.
func BenchmarkTLS_RecordCrypto(b *testing.B) {
	for _, bits := range []int{128, 256} {
		for _, op := range []string{"seal", "open"} {
			b.Run(fmt.Sprintf("aes-%d-gcm/%s", bits, op), func(b *testing.B) {
				block, err := aes.NewCipher(make([]byte, bits/8))
				if err != nil {
					b.Fatal(err)
				}
				aead, err := cipher.NewGCM(block)
				if err != nil {
					b.Fatal(err)
				}
				nonce := make([]byte, aead.NonceSize())
				record := make([]byte, 16<<10)
				sealed := aead.Seal(nil, nonce, record, nil)
				out := make([]byte, 0, len(sealed))
				b.SetBytes(int64(len(record)))
				c0 := processCPU()
				for b.Loop() {
					if op == "seal" {
						out = aead.Seal(out[:0], nonce, record, nil)
					} else if out, err = aead.Open(out[:0], nonce, sealed, nil); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time, not elapsed time: on a shared machine the
				// elapsed time also counts the others' turns on the core.
				cpu := processCPU() - c0
				b.ReportMetric(float64(cpu.Microseconds())/(float64(b.N)/64), "cpu-us/MiB")
			})
		}
	}
}
