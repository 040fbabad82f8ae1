package csi

import (
	"encoding/base64"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// tokenPrefix marks a ListVolumes token as one this package issued; the rest of
// the token is the id of the last volume of the previous page.
const tokenPrefix = "vigil-list-v1:"

// encodeToken returns the opaque token that resumes a listing after id.
func encodeToken(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tokenPrefix + id))
}

// decodeToken returns the volume id a token resumes after ("" for no token), or
// Aborted for a token this package did not issue.
func decodeToken(token string) (string, error) {
	if token == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	// Strict still skips '\r' and '\n', so only a token that re-encodes to
	// itself is one ListVolumes issued.
	canonical := err == nil && base64.RawURLEncoding.EncodeToString(raw) == token
	if !canonical || !strings.HasPrefix(string(raw), tokenPrefix) || len(raw) == len(tokenPrefix) {
		return "", status.Errorf(codes.Aborted,
			"starting_token %q was not issued by ListVolumes; start again with an empty token", token)
	}
	return strings.TrimPrefix(string(raw), tokenPrefix), nil
}

// paginate returns up to limit volumes (0: all) with an id greater than after,
// in id order, and the token for the next page ("" when nothing is left).
func paginate(vols []datapath.Volume, after string, limit int) ([]datapath.Volume, string) {
	vols = slices.Clone(vols)
	slices.SortFunc(vols, func(a, b datapath.Volume) int { return strings.Compare(a.ID, b.ID) })
	start, _ := slices.BinarySearchFunc(vols, after, func(v datapath.Volume, id string) int {
		return strings.Compare(v.ID, id)
	})
	for start < len(vols) && vols[start].ID <= after {
		start++
	}
	rest := vols[start:]
	if limit <= 0 || limit >= len(rest) {
		return rest, ""
	}
	page := rest[:limit]
	return page, encodeToken(page[len(page)-1].ID)
}
