package settings

import "strings"

// closest returns the candidate nearest to s, ignoring case ("DRY-RUN" suggests
// dry-run as "Dry-Run" does), if its edit distance is small enough to be a
// plausible typo (at most a third of the candidate's length, and at least 1), or
// "" otherwise.
func closest(s string, candidates []string) string {
	s = strings.ToLower(s)
	best, bestDist := "", -1
	for _, c := range candidates {
		limit := max(len(c)/3, 1)
		if abs(len(s)-len(c)) > limit {
			continue // the distance is at least the difference in length
		}
		d := editDistance(s, strings.ToLower(c))
		if d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// editDistance is the optimal-string-alignment distance between a and b, in
// bytes: insertions, deletions, substitutions and swaps of two neighbours ("wiat"
// for "wait") each cost 1.
func editDistance(a, b string) int {
	// Three rows: the one before the previous is needed for swaps.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
