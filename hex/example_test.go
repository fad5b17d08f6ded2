package hex_test

import (
	"fmt"

	"github.com/seriema-go/seriema/hex"
)

func Example() {
	b, _ := hex.New(3)
	for _, name := range []string{"b1", "a2", "b2", "c2", "a3"} {
		c, _ := hex.ParseCell(name, b.Size())
		if err := b.Play(c); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Print(b.String())
	fmt.Println("winner:", b.Winner())
	// Output:
	//     a b c
	//   1 . X .
	//    2 O X O
	//     3 X . .
	// winner: black
}
