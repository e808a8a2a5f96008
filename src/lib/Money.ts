// Exact decimal money: Postgres `numeric` arrives as a string and is never turned into a float sum.
import { BigDecimal } from "effect"

/** A numeric column value (string) as an exact BigDecimal. */
export const dec = (value: string | number): BigDecimal.BigDecimal =>
  BigDecimal.normalize(BigDecimal.unsafeFromString(String(value)))

/** The string a numeric parameter is bound with. */
export const sqlDec = (value: BigDecimal.BigDecimal): string => BigDecimal.format(BigDecimal.normalize(value))
