package datapath

import (
	"slices"
	"strings"
	"testing"
)

func TestParseServerList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string // a part of the error; "" means no error
	}{
		{in: "127.0.0.1:9600", want: []string{"127.0.0.1:9600"}},
		{in: "a:1,b:2,c:3", want: []string{"a:1", "b:2", "c:3"}},
		{in: " a:1 , b:2 ", want: []string{"a:1", "b:2"}},
		{in: "[::1]:9600,localhost:9601", want: []string{"[::1]:9600", "localhost:9601"}},
		{in: "", wantErr: "empty; want host:port"},
		{in: "  ", wantErr: "empty; want host:port"},
		{in: "a:1,,b:2", wantErr: "item 2: empty"},
		{in: "a:1,", wantErr: "item 2: empty"},
		{in: "a", wantErr: `item 1: "a" is not host:port`},
		{in: ":9600", wantErr: `item 1: ":9600" has no host`},
		{in: "a:1,b:x", wantErr: `item 2: "b:x": port "x" is not a number from 1 to 65535`},
		{in: "a:0", wantErr: `port "0" is not a number from 1 to 65535`},
		{in: "a:65536", wantErr: `port "65536" is not a number`},
		{in: "a:1,b:2,a:1", wantErr: "a:1 is given twice (items 1 and 3)"},
	} {
		got, err := ParseServerList(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseServerList(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseServerList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
