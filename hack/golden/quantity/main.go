// Command quantity prints, for each input line, what k8s.io/apimachinery's resource.Quantity
// writes for it: the input, json.Marshal(ParseQuantity(input)), and the same after
// RoundUp(resource.Milli) (what resource requirements get when defaulted), tab-separated, or
// ERROR where ParseQuantity refuses the input. It makes tests/fixtures/quantity/golden.tsv:
//
//	go run . < inputs.txt > ../../../tests/fixtures/quantity/golden.tsv
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

func marshal(q resource.Quantity) string {
	b, err := json.Marshal(q)
	if err != nil {
		return "ERROR"
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "ERROR"
	}
	return s
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("# input\tParseQuantity, marshalled\tthe same after RoundUp(Milli)")
	fmt.Println("# made by hack/golden/quantity (k8s.io/apimachinery v0.32.10, as OpenKruise v1.9)")
	for in.Scan() {
		line := in.Text()
		if line == "" {
			continue
		}
		q, err := resource.ParseQuantity(line)
		if err != nil {
			fmt.Printf("%s\tERROR\tERROR\n", line)
			continue
		}
		plain := marshal(q)
		q.RoundUp(resource.Milli)
		fmt.Printf("%s\t%s\t%s\n", line, plain, marshal(q))
	}
}
