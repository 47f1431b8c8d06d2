import java.nio.file.Files;
import java.nio.file.Path;

/** Prints the sum of the integers in the file named by its argument, one a line. */
public class Sum {
    public static void main(String[] args) throws Exception {
        long total = 0;
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            if (!line.isBlank()) {
                total += Long.parseLong(line.trim());
            }
        }
        System.out.println("sum=" + total);
    }
}
