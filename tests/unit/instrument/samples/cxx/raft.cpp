#include <cstdio>
#include <cstdlib>
#include <vector>

struct Node {
    // INSTRUMENT_FUNC leader-elected
    void become_leader(int term) { term_ = term; }
    int term_ = 0;
};

// INSTRUMENT_FUNC summed
template <typename T>
T total(const std::vector<T> &values)
{
    T sum = 0;
    for (const T &v : values) {
        // INSTRUMENT_BLOCK add-one
        sum += v;
    }
    return sum;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 2;
    Node node;
    for (int i = 0; i < n; i++)
        node.become_leader(i);
    std::vector<int> ints{1, 2, 3};
    std::vector<double> doubles{0.5, 1.5};
    std::printf("term %d ints %d doubles %.1f\n", node.term_, total(ints), total(doubles));
    return 0;
}
